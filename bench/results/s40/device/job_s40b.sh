#!/usr/bin/env bash
# s40: the host's time in P5's closed batch (64 x 96 tokens, B = 16), launcher thread off so
# that MLX's encoding lands under the Python call that evaluates: cProfile of the second pass,
# MTP at fixed depth 3 and plain (bench/join_host_profile.py).
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
SPECFLEET_LAUNCH_THREAD=0 timeout ${TMO:-400} python3 -m bench.join_host_profile --model-dir $T --batch-size ${B:-16} --spread ${SPREAD:-0} --engines ${ENGINES:-mtp_fixed,plain} --out $OUT/join_host_profile_b${B:-16}.txt 2>&1 | grep -v -i "warning" | tail -5
