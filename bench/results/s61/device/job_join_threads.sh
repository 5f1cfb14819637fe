#!/usr/bin/env bash
# s61: join_threads.py on the trained hybrid (staged as in stop 57's q35t.sh).
# Usage: bash job_join_threads.sh TAG "B PROMPTS REPS" ["B PROMPTS REPS" ...]
source bench/results/s57/device/q35t.sh
tag=$1; shift
for spec in "$@"; do
  set -- $spec
  PYTHONPATH=.:$PYTHONPATH timeout 280 python3 bench/results/s61/device/join_threads.py \
    /root/q35t "$1" "$2" "$3" "$OUT/join_threads_${tag}_b$1.json" 2>&1 | grep -v -i warning | cut -c1-400
done
nvidia-smi --query-gpu=name --format=csv,noheader
