#!/usr/bin/env bash
# s54: P5 with skinny linears on and off, in one process (skinny_p5_gpu.py), on the hybrid that
# job_train.sh left at /root/q35t. Usage: bash job_p5.sh BATCH_SIZES PROMPTS TAG
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1
PYTHONPATH=.:$PYTHONPATH timeout 590 python3 bench/results/s54/device/skinny_p5_gpu.py \
  --model-dir /root/q35t --batch-sizes "$1" --prompts "$2" 2>&1 | grep -v -i warning \
  | tee "$OUT/skinny_p5_$3_h200.jsonl"
nvidia-smi --query-gpu=name --format=csv,noheader
