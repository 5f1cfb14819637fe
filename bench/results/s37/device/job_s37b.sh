#!/usr/bin/env bash
# s37: job_s37a's B=8 again (its first run, before B=8, timed out at 130 s: the process's first
# builds), trees in turns: before, after, before, after
source "$(dirname "$0")/setup.sh"
B=8
for side in before after before after; do
  d=/root/t37; [ $side = before ] && d=/root/before
  (cd $d && timeout 160 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes $B --adaptive --label "$side" --out $OUT/accounting_${side}_b${B}_$RANDOM.json 2>&1 | grep -v Warning | tail -1 | cut -c1-400)
done
