#!/usr/bin/env bash
# Stop 53, device job D: the window kernel before/after (per call, launch by launch, rounds),
# then P1/P2 on this tree's defaults (new kernel, skinny on).
set -u
export PYTHONPATH=.:$PYTHONPATH
K=bench/results/s53/device/kernel_ab_gpu.py
timeout 120 python3 $K micro --out $OUT/kernel_micro_h200.json
MLX_USE_CUDA_GRAPHS=0 timeout 150 /usr/local/cuda/bin/ncu --cache-control none --clock-control none \
  --metrics gpu__time_duration.sum --csv --log-file $OUT/kernel_micro_ncu.csv \
  python3 $K micro --n 2 --passes 1 --out /tmp/m.json > /dev/null 2>&1; gzip -f $OUT/kernel_micro_ncu.csv
timeout 200 python3 $K rounds --presets 1b,6b --out $OUT/kernel_rounds_h200.json
python3 -m bench.gpu --presets 6b,1b --batch-sizes 1,8,32 --repeats 3 --skip-default --out $OUT/gpu_h200.json
