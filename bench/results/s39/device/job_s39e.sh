#!/usr/bin/env bash
# s39: join_wait with the join's fixed part as its overhead (tree: the commit after c3303bb),
# closed batch of 64 x 96 tokens, B=16, 2 pairs: the last ~180 s of the session's device time.
source "$(dirname "$0")/setup.sh"
timeout 140 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 2 --batch-sizes 16 --adaptive --ab-policy as_is,join_wait --out $OUT/closed_wait2_b16.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300
