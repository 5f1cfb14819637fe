#!/usr/bin/env bash
# s55: launch_ab_gpu.py on the random Qwen3.5-shape peer (bf16), after MLX's CUDA staging.
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:$PYTHONPATH
[ -d /root/q35 ] || python3 -m bench.peer_model --out /root/q35 --dtype bfloat16 2>&1 | tail -1
timeout ${1:-400} python3 bench/results/s55/device/launch_ab_gpu.py --model-dir /root/q35 \
  --batch-sizes "${2:-1,4}" --prompts "${3:-16,32}" --passes 3 2>&1 | grep -v -i warning \
  | tee "$OUT/launch_ab_h200.jsonl"
nvidia-smi --query-gpu=name --format=csv,noheader
