#!/usr/bin/env bash
# s35: settles only when the batch changes (before: every step while requests wait), A/B by trees in
# turns: adaptive_trace's split of plain and MTP passes, B=8, 64 prompts of 48-144 tokens
source "$(dirname "$0")/setup.sh"
for i in 1 2; do
  for side in before after; do
    d=/root/t35; [ $side = before ] && d=/root/before
    (cd $d && timeout 140 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 8 --prompts 64 --reps 2 --spread 0.5 --out $OUT/settle_ab_${side}_$i.json 2>&1 | grep -v Warning | grep -E "split|ratio" | sed "s/cells.*//" | cut -c1-400 | sed "s/^/$side$i /")
  done
done
