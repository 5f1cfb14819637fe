#!/usr/bin/env bash
# s35: settles only when the batch changes (before: every step while requests wait), A/B by trees in
# turns: adaptive_trace's split of plain and MTP passes, B=8, 64 prompts of 48-144 tokens
source /root/mlxgpu/env.sh
rm -rf /root/t35 && cp -r . /root/t35 && cd /root/t35 && rm -rf .gpu3/old
rm -rf /root/before && mv .gpu3/tree_before /root/before
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do
  for side in before after; do
    d=/root/t35; [ $side = before ] && d=/root/before
    (cd $d && timeout 140 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 8 --prompts 64 --reps 2 --spread 0.5 --out $OUT/settle_ab_${side}_$i.json 2>&1 | grep -v Warning | grep -E "split|ratio" | sed "s/cells.*//" | cut -c1-400 | sed "s/^/$side$i /")
  done
done
