#!/usr/bin/env bash
# s35: the adaptive policy after the settle change with hand-off waits left out of round costs, B=8
source "$(dirname "$0")/setup.sh"
timeout 130 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 8 --prompts 64 --reps 2 --spread 0.5 --out $OUT/settle_handoff_after_b8.json 2>&1 | grep -v Warning | grep -E "split|ratio|depths" | sed "s/cells.*//" | cut -c1-500
