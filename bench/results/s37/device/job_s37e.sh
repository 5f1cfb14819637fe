#!/usr/bin/env bash
# s37: a capped cost weighed with the error of the cell that caps it (97ab79e, after) against
# 402e6f6 (before): served adaptive MTP and plain, 64 prompts of 48-144 tokens, in turns at
# B=16 (before, after), then B=8 after; the whole job under 230 s (the session's device time)
source "$(dirname "$0")/setup.sh"
for run in "16 before" "16 after" "8 after"; do
  set -- $run; B=$1; side=$2
  d=/root/t37; [ $side = before ] && d=/root/before
  (cd $d && timeout 75 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes $B --adaptive --label "$side" --out $OUT/margin_${side}_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300)
done
