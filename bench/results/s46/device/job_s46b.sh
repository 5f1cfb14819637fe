#!/usr/bin/env bash
# s46: P5 at the product's default depth cap (4) and at 3, B = 1 (16 prompts), 4 (32) and 16
# (64), 96 tokens +- 50%, MLX's defaults (CUDA graphs on), plain and both caps in turns.
source "$(dirname "$0")/setup.sh"
PYTHONPATH=.:$PYTHONPATH timeout 560 python3 bench/results/s46/device/depth_caps_gpu.py --model-dir $T --batch-sizes 1,4,16 --prompts 16,32,64 --caps 3,4 --passes 4 2>&1 | grep -v -i warning
