#!/usr/bin/env bash
# s38: where an MTP engine's joins go on served traffic (bench.join_split, B=16, joins synced),
# 61eb683 (before) against the padded prompt window (after), then after with the head as ops;
# a throwaway first process pays the machine's builds first.
source "$(dirname "$0")/setup.sh"
(cd /root/t38 && timeout 110 python3 -m bench.p5_pairs --model-dir $T --prompts 16 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
for run in "before 1" "after 1" "after 0"; do
  set -- $run; side=$1; comp=$2
  d=/root/t38; [ $side = before ] && d=/root/before
  (cd $d && SPECFLEET_COMPILE_DRAFT=$comp timeout 120 python3 -m bench.join_split --model-dir $T --batch-sizes 16 --sync-joins --out $OUT/join_${side}_c$comp.json 2>&1 | grep -v Warning | grep pass1 | cut -c1-700)
done
