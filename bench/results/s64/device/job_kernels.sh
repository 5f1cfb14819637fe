#!/usr/bin/env bash
# s64: device time of every kernel of a 6.6B B = 1 engine job on this tree (routes as the
# engine installs them), forced depth-4 rounds against plain steps, by Nsight Compute launch by
# launch (CUDA graphs off), beside the same jobs' wall time unprofiled (graphs on and off).
# After MLX's CUDA staging. Usage: bash job_kernels.sh
set -u
export PYTHONPATH=.:$PYTHONPATH
S=bench/results/s53/device/round_timeline_gpu.py  # stop 53's job script, as it was
for g in 1 0; do
  MLX_USE_CUDA_GRAPHS=$g python3 $S --preset 6b --tokens 32 --forced 2>&1 | grep -v -i warn | tail -1
  MLX_USE_CUDA_GRAPHS=$g python3 $S --preset 6b --tokens 12 2>&1 | grep -v -i warn | tail -1
done
for m in forced plain; do
  flag=$([ $m = forced ] && echo "--forced --tokens 32" || echo "--tokens 12")
  MLX_USE_CUDA_GRAPHS=0 timeout 200 /usr/local/cuda/bin/ncu --profile-from-start off --cache-control none \
    --clock-control none --metrics gpu__time_duration.sum --csv --log-file $OUT/kernels_$m.csv \
    python3 $S --preset 6b $flag 2>&1 | grep -v -i warn | tail -1
  gzip -f $OUT/kernels_$m.csv
done
python3 bench/results/s52/device/kernel_table.py $OUT/kernels_forced.csv.gz $OUT/kernels_plain.csv.gz | tail -40
nvidia-smi --query-gpu=name --format=csv,noheader
