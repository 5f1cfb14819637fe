#!/usr/bin/env bash
# s35: settle A/B by trees at fixed depth 3 (no policy): plain and MTP pairs, B=8, 64 prompts of 48-144 tokens
source "$(dirname "$0")/setup.sh"
for side in before after; do
  d=/root/t35; [ $side = before ] && d=/root/before
  (cd $d && timeout 120 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes 8 --label "$side" --out $OUT/settle_fixed_${side}.json 2>&1 | grep -v Warning | tail -2 | cut -c1-600)
done
