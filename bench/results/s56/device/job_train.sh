#!/usr/bin/env bash
# s56: P5's trained hybrid (bench/peer_trained.py, stop 37's recipe: 3000 target + 2000 head
# steps, bf16) at /root/q35t. The corpus (train_default --export-corpus) travels as .gpu3/
# beside .gpu2/ (tree + both: ~47 MB, under the 64 MiB carry).
# Usage: [STOP=s57] bash job_train.sh (STOP names the copied peer_model.json; s56 by default)
source .gpu2/finish.sh
mkdir -p /root/c && cp .gpu3/corpus.npz /root/c/
export PYTHONUNBUFFERED=1
PYTHONPATH=.:$PYTHONPATH timeout 570 python3 -m bench.peer_trained --corpus /root/c/corpus.npz \
  --out /root/q35t --dtype bfloat16 2>&1 | grep -v -i warning | tail -12
cp /root/q35t/peer_model.json "$OUT/peer_trained_${STOP:-s56}_h200.json"
nvidia-smi --query-gpu=name --format=csv,noheader
