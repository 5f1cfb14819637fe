#!/usr/bin/env bash
# s60: which linear calls of a decode round take the per-row route on MLX CUDA (bf16), plain
# and MTP at depth 4, trained hybrid staged as in stop 57's q35t.sh.
# Usage: bash job_linear_routes.sh B
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 300 python3 -m bench.linear_routes --model-dir /root/q35t \
  --batch-size "$1" --prompts "$1" --depth 4 --out "$OUT/linear_routes_b$1_h200.json" 2>&1 \
  | grep -v -i warning | cut -c1-200 | tail -36
