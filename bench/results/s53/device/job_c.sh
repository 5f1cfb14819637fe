#!/usr/bin/env bash
# Stop 53, device job C: device time of every kernel of an engine job (6.6B, B=1), plain and
# forced, by Nsight Compute launch by launch, beside the same job's wall time unprofiled.
set -u
export PYTHONPATH=.:$PYTHONPATH
S=bench/results/s53/device/round_timeline_gpu.py
python3 $S --preset 6b --tokens 32 --forced
python3 $S --preset 6b --tokens 12
python3 $S --preset 6b --tokens 32
MLX_USE_CUDA_GRAPHS=0 python3 $S --preset 6b --tokens 32 --forced
MLX_USE_CUDA_GRAPHS=0 python3 $S --preset 6b --tokens 32
for m in forced plain; do
  flag=$([ $m = forced ] && echo "--forced --tokens 32" || echo "--tokens 12")
  MLX_USE_CUDA_GRAPHS=0 timeout 200 /usr/local/cuda/bin/ncu --profile-from-start off --cache-control none \
    --clock-control none --metrics gpu__time_duration.sum --csv --log-file $OUT/job_$m.csv \
    python3 $S --preset 6b $flag
  gzip -f $OUT/job_$m.csv
done
