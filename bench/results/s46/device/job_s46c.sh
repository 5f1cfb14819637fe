#!/usr/bin/env bash
# s46: job b with MLX's CUDA graphs off (MLX_USE_CUDA_GRAPHS=0: kernels launched one by one;
# MLX reads it once per process, so this is a process of its own).
source "$(dirname "$0")/setup.sh"
MLX_USE_CUDA_GRAPHS=0 PYTHONPATH=.:$PYTHONPATH timeout 560 python3 bench/results/s46/device/depth_caps_gpu.py --model-dir $T --batch-sizes 1,4,16 --prompts 16,32,64 --caps 3,4 --passes 4 2>&1 | grep -v -i warning
