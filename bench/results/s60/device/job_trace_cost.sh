#!/usr/bin/env bash
# s60: what a graph node costs the host on MLX CUDA, by kind (bench.primitive_cost: check out
# 9584657 to rerun it as it ran; since folded into bench.dispatch_cost), then the serving
# policy's trace at B (bench.adaptive_trace, cap DEPTH, served traffic), with the checkpoint
# staged as in stop 57's q35t.sh. Usage: bash job_trace_cost.sh B PROMPTS DEPTH TAG
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 120 python3 -m bench.primitive_cost --out "$OUT/primitive_cost_h200.json" 2>&1 | grep -v -i warning
PYTHONPATH=.:$PYTHONPATH timeout 400 python3 -m bench.adaptive_trace --model-dir /root/q35t \
  --batch-sizes "$1" --prompts "$2" --depth "$3" --spread 0.5 --reps 3 \
  --out "$OUT/trace_$4.json" 2>&1 | grep -v -i warning | cut -c1-600 | tail -14
