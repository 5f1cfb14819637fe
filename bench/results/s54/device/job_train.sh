#!/usr/bin/env bash
# s54: P5's trained hybrid (bench/peer_trained.py, stop 37's recipe: 3000 target + 2000 head
# steps, bf16) at /root/q35t, from the corpus train_default --export-corpus writes (carried as .gpu3/, copied to /root/c first).
source .gpu2/finish.sh
export PYTHONUNBUFFERED=1
PYTHONPATH=.:$PYTHONPATH timeout 585 python3 -m bench.peer_trained --corpus /root/c/corpus.npz \
  --out /root/q35t --dtype bfloat16 2>&1 | grep -v -i warning | tail -12
cp /root/q35t/peer_model.json "$OUT/peer_trained_s54_h200.json"
nvidia-smi --query-gpu=name --format=csv,noheader
