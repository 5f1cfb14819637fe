#!/usr/bin/env bash
# s36: closed batch served P5, trees in turns (before 3995143, after: hand-off charged)
source "$(dirname "$0")/setup.sh"
for side in before after before; do
  d=/root/t35; [ $side = before ] && d=/root/before
  (cd $d && timeout 150 python3 -m bench.p5_pairs --model-dir $T --pairs 2 --batch-sizes 1,8,16 --adaptive --label "$side" --out $OUT/p5_closed_${side}_$RANDOM.json 2>&1 | grep -v Warning | tail -3 | cut -c1-300)
done
