#!/usr/bin/env bash
# s61: cold_pass.py on the trained hybrid (staged as in stop 57's q35t.sh). Usage: bash job_cold.sh "B PROMPTS" [...]
source bench/results/s57/device/q35t.sh
for spec in "$@"; do
  set -- $spec
  PYTHONPATH=.:$PYTHONPATH timeout 250 python3 bench/results/s61/device/cold_pass.py /root/q35t "$1" "$2" \
    "$OUT/cold_pass_b$1.json" 2>&1 | grep -v -i warning | cut -c1-330 | head -60
done
nvidia-smi --query-gpu=name --format=csv,noheader
