#!/usr/bin/env bash
# s36: where an all-plain adaptive pass loses to plain at B=16 (closed batch, 64 prompts x 96 tokens): the split
source "$(dirname "$0")/setup.sh"
timeout 200 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 16 --prompts 64 --reps 3 --out $OUT/adaptive_closed64_b16_s36_h200.json 2>&1 | grep -v Warning | grep -E "split|ratio|depths" | sed "s/cells.*//" | cut -c1-700
