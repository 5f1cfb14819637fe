#!/usr/bin/env bash
# s35: the served policy's reason per round (probe/explore/held/rates/drain) as traffic ends apart
# (64 prompts, 96 +- 50% tokens), B=16 and 8, trained hybrid
source /root/mlxgpu/env.sh
rm -rf /root/t35 && cp -r . /root/t35 && cd /root/t35 && rm -rf .gpu3/old
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 420 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 16,8 --prompts 64 --reps 2 --spread 0.5 --out $OUT/adaptive_split_64p_spread_s35_h200.json 2>&1 | grep -v Warning | grep -v "cells" | cut -c1-900
