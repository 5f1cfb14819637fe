# Sourced by a stop's device setup (`source bench/device_setup.sh TREE` from the repository root
# on the lent GPU machine, after .gpu1/stage.sh, .gpu2a/stage.sh and .gpu2/finish.sh set up
# MLX's CUDA build): this tree copied to /root/TREE and entered, a carried tree of the commit
# before a change (.gpu3/tree_before) moved to /root/before, the trained hybrid at $T (unpacked
# from .gpu3/model, made by bench/results/s37's job_s37_train.sh), the card named.
source /root/mlxgpu/env.sh
rm -rf "/root/$1" && cp -r . "/root/$1" && cd "/root/$1"
if [ -d .gpu3/tree_before ]; then rm -rf /root/before && mv .gpu3/tree_before /root/before; fi
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
