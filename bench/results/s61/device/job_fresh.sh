#!/usr/bin/env bash
# s61: fresh_prompts.py on the trained hybrid (staged as in stop 57's q35t.sh). Usage: bash job_fresh.sh B [B ...]
source bench/results/s57/device/q35t.sh
for B in "$@"; do
  PYTHONPATH=.:$PYTHONPATH timeout 250 python3 bench/results/s61/device/fresh_prompts.py /root/q35t "$B" \
    "$OUT/fresh_prompts_b$B.json" 2>&1 | grep -v -i warning | cut -c1-300
done
nvidia-smi --query-gpu=name --format=csv,noheader
