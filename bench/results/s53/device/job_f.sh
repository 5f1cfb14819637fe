#!/usr/bin/env bash
# Stop 53, device job F: registers a thread and time per launch of the window kernel before and
# after (Nsight Compute), and the kernels of one 6.6B verify forward (W = 5) on this tree.
set -u
export PYTHONPATH=.:$PYTHONPATH
NCU="/usr/local/cuda/bin/ncu --cache-control none --clock-control none --csv"
MLX_USE_CUDA_GRAPHS=0 timeout 150 $NCU --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers \
  --log-file $OUT/kernel_regs_ncu.csv python3 bench/results/s53/device/kernel_ab_gpu.py micro --n 2 --passes 1 --out /tmp/m.json > /dev/null 2>&1
gzip -f $OUT/kernel_regs_ncu.csv
MLX_USE_CUDA_GRAPHS=0 timeout 120 $NCU --profile-from-start off --metrics gpu__time_duration.sum --log-file $OUT/k_6b_w5_after.csv \
  python3 bench/results/s52/device/kernel_split_gpu.py --preset 6b --window 5 --skinny > /dev/null 2>&1
gzip -f $OUT/k_6b_w5_after.csv
ls -la $OUT
