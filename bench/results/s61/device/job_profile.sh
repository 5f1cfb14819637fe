#!/usr/bin/env bash
# s61: engine_profile.py on the trained hybrid (staged as in stop 57's q35t.sh). Usage: bash job_profile.sh B PROMPTS
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 280 python3 bench/results/s61/device/engine_profile.py /root/q35t "$1" "$2" \
  "$OUT/engine_profile_b$1" 2>&1 | grep -v -i warning | cut -c1-200 | grep -v "^$" | head -150
nvidia-smi --query-gpu=name --format=csv,noheader
