# Sourced by every job here (`bash .gpu3/job_*.sh` from the repository root on the device, after
# .gpu1/stage.sh and .gpu2/finish.sh set up MLX's CUDA build): this tree copied to /root/t35 and
# entered, a carried tree of the commit before a change moved to /root/before, the trained hybrid
# unpacked at $T, the card's name printed.
source /root/mlxgpu/env.sh
rm -rf /root/t35 && cp -r . /root/t35 && cd /root/t35 && rm -rf .gpu3/old
if [ -d .gpu3/tree_before ]; then rm -rf /root/before && mv .gpu3/tree_before /root/before; fi
export PYTHONUNBUFFERED=1
T=/root/q35t
[ -d $T ] || (cat .gpu3/model/q35t.tar.xz.part.* | tar -xJf - -C /root)
rm -rf .gpu3/model
nvidia-smi --query-gpu=name --format=csv,noheader
