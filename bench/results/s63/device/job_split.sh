#!/usr/bin/env bash
# s63: skinny_split_gpu.py after MLX's CUDA staging (../shared/tools/mlx-cuda-pack: run 1
# `bash .gpu1/stage.sh`, then this with carry [".gpu2"]).
[ -f /root/mlxgpu/env.sh ] || source .gpu2/finish.sh
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:$PYTHONPATH
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${1:-560} python3 bench/results/s63/device/skinny_split_gpu.py --out "$OUT/skinny_split_h200.json" \
  --rows ${2:-5} --presets ${3:-6b,1b} --batch-sizes ${4:-1,8} --repeats 3 ${5:-} 2>&1 | grep -v -i warning
