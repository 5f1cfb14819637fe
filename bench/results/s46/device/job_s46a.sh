#!/usr/bin/env bash
# s46: the adaptive depth's cap (3, 4, 5) on P5's trained hybrid at B = 1 (16 prompts) and 4 (32),
# 96 tokens +- 50% (served traffic's spread), plain and the three caps in turns in one process.
source "$(dirname "$0")/setup.sh"
PYTHONPATH=.:$PYTHONPATH timeout 540 python3 bench/results/s46/device/depth_caps_gpu.py --model-dir $T --batch-sizes 1,4 --prompts 16,32 --caps 3,4,5 --passes 4 2>&1 | grep -v -i warning
