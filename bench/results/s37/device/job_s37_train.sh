#!/usr/bin/env bash
# s37: the trained Qwen3.5-shape hybrid with its MTP head (bench/peer_trained.py, the recipe of
# stops 27-36's P5 checkpoint: 3000 target + 2000 head steps, bf16), kept at $T for the jobs after.
source "$(dirname "$0")/setup.sh"
cp .gpu3/corpus.npz /root/corpus.npz
timeout 585 python3 -m bench.peer_trained --corpus /root/corpus.npz --out $T --dtype bfloat16 2>&1 | grep -v Warning | tail -15
cp $T/peer_model.json $OUT/peer_trained_s37_h200.json 2>/dev/null; ls -la $T
