#!/usr/bin/env bash
# s37: the launch-wait accounting as mended (115b541, main 7387950) against 3995143 (before it):
# served adaptive MTP and plain, 64 prompts of 48-144 tokens, B=8 and 16, trees in turns
source "$(dirname "$0")/setup.sh"
for B in 8 16; do
  for side in before after; do
    d=/root/t37; [ $side = before ] && d=/root/before
    (cd $d && timeout 130 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes $B --adaptive --label "$side" --out $OUT/accounting_${side}_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-400)
  done
done
