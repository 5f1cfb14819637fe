#!/usr/bin/env bash
# s44: P2 at B = 1 on the H200: where the forced round's wall time goes (plain and the
# always-right drafter at depth 4, pipelined and synced, random bf16 Qwen3 6.6B).
source "$(dirname "$0")/setup.sh"
PYTHONPATH=.:$PYTHONPATH timeout 400 python3 bench/results/s44/device/forced_split_6b.py --reps 3 2>&1 | grep -v -i warning
