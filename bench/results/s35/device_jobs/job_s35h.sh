#!/usr/bin/env bash
# s35: the adaptive policy after the settle change with hand-off waits left out of round costs, B=8
source /root/mlxgpu/env.sh
rm -rf /root/t35 && cp -r . /root/t35 && cd /root/t35 && rm -rf .gpu3/old .gpu3/tree_before
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 130 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 8 --prompts 64 --reps 2 --spread 0.5 --out $OUT/settle_handoff_after_b8.json 2>&1 | grep -v Warning | grep -E "split|ratio|depths" | sed "s/cells.*//" | cut -c1-500
