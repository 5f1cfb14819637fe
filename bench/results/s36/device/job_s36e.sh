#!/usr/bin/env bash
# s36: why adaptive loses in a short closed batch (16 prompts x 96 tokens), B=8 and 16: reasons and split
source "$(dirname "$0")/setup.sh"
timeout 300 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 8,16 --prompts 16 --reps 3 --out $OUT/adaptive_closed16_s36_h200.json 2>&1 | grep -v Warning | grep -E "split|ratio|depths" | sed "s/cells.*//" | cut -c1-600
