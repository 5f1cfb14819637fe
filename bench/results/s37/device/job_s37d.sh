#!/usr/bin/env bash
# s37: why adaptive MTP trails fixed depth 3 on served traffic (1.20-1.27 against 1.33 at B=8,
# 0.85 against 1.12 at B=16): the policy's rounds traced on the same traffic, the accounting
# reverted (934cd56)
source "$(dirname "$0")/setup.sh"
for B in 8 16; do
  timeout 170 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes $B --prompts 64 --spread 0.5 --reps 2 --out $OUT/adaptive_served_b${B}_s37_h200.json 2>&1 | grep -v Warning | cut -c1-600 | tail -40
done
