#!/usr/bin/env bash
# s60: the per-row gemv route's limits at B = 16, cap 4 (a depth-4 verify is 80 rows of
# 6 KiB-0.75 MiB weights and the 1.5 MiB lm_head: past ROWS_MAX 64, so it takes cuBLASLt, whose
# launch costs ~11-16 us of host against ~6 for the route's three nodes, bench.dispatch_cost).
# bench.p5_pairs --ab-row-limits OFF,ON in turns in one process, trained hybrid staged as in
# stop 57's q35t.sh. Usage: bash job_row_limits.sh B PROMPTS PAIRS TAG OFF,ON
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 560 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$1" --prompts "$2" --pairs "$3" --adaptive --depth 4 --spread 0.5 \
  --ab-row-limits "$5" --label "$4" --out "$OUT/p5_$4.json" 2>&1 | grep -v -i warning | tail -6
