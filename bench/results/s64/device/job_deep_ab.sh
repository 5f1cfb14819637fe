#!/usr/bin/env bash
# s64, for the next device run: two pipelined rounds in flight (EngineConfig.pipeline_depth=2)
# against one, plain and forced depth-4 rounds, in turns in one process (bench.gpu --ab-deep).
# After MLX's CUDA staging. Usage: bash job_deep_ab.sh [BATCH_SIZES]
PYTHONPATH=.:$PYTHONPATH timeout 560 python3 -m bench.gpu --presets 6b,1b \
  --batch-sizes "${1:-1,8,32}" --repeats 3 --skip-default --ab-deep \
  --out "$OUT/gpu_deep_ab_h200.json" 2>&1 | grep -v -i warning | cut -c1-1500 | tail -8
nvidia-smi --query-gpu=name --format=csv,noheader
