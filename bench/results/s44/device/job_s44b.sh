#!/usr/bin/env bash
# s44: joiners drafting from their first round (held) against the drafter before (waits), in
# one process, on P5's trained hybrid (adaptive MTP ÷ plain): B = 1 (16 prompts), 4 (32) and
# 16 (64), 96 tokens +- 50% (served traffic's spread).
source "$(dirname "$0")/setup.sh"
PYTHONPATH=.:$PYTHONPATH timeout 500 python3 bench/results/s44/device/first_round_gpu.py --model-dir $T --batch-sizes 1,4,16 --prompts 16,32,64 --passes 4 2>&1 | grep -v -i warning
