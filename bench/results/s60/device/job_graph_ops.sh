#!/usr/bin/env bash
# s60: primitives per round on MLX CUDA, plain against MTP (and the head's share, by name),
# trained hybrid staged as in stop 57's q35t.sh. Usage: bash job_graph_ops.sh BATCH_SIZES DEPTH
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 400 python3 -m bench.graph_ops --model-dir /root/q35t \
  --batch-sizes "$1" --prompts 16 --max-tokens 48 --depth "$2" --top 80 \
  --out "$OUT/graph_ops_d$2_h200.json" 2>&1 | grep -v -i warning | cut -c1-300 | tail -8
