#!/usr/bin/env bash
# s41: P1 / P2 (random bf16 Qwen3 6.6B, bench/gpu.py: plain and the always-right drafter at
# depth 4 against mlx-lm's BatchGenerator) with MLX's CUDA graphs (defaults) and without
# (MLX_USE_CUDA_GRAPHS=0), a process each, in turns: does graphs-off, which helps the hybrid's
# MTP rounds (job a), cost a larger model's decode?
source "$(dirname "$0")/setup.sh"
for setting in nographs base; do
  envs=""; [ $setting = nographs ] && envs="MLX_USE_CUDA_GRAPHS=0"
  env $envs timeout 270 python3 -m bench.gpu --presets 6b --batch-sizes 1,8 --repeats 3 --skip-default --out $OUT/gpu_6b_${setting}.json 2>&1 | grep -v Warning | tail -4 | cut -c1-300
done
