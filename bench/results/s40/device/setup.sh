# Sourced by every job here (`bash bench/results/s40/device/job_*.sh` from the repository root on the device, after
# .gpu1/stage.sh, .gpu2a/stage.sh and .gpu2/finish.sh set up MLX's CUDA build): this tree copied
# to /root/t40 and entered, a carried tree of the commit before a change moved to /root/before,
# the trained hybrid at $T (unpacked from .gpu3/model, made by s37's job_s37_train.sh), the card named.
source /root/mlxgpu/env.sh
rm -rf /root/t40 && cp -r . /root/t40 && cd /root/t40
if [ -d .gpu3/tree_before ]; then rm -rf /root/before && mv .gpu3/tree_before /root/before; fi
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
