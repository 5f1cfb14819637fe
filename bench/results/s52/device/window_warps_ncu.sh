# Stop 52: the ragged window kernel's device time per call, by warps per block, as Nsight
# Compute times each launch (serialized, CUDA graphs off: in one graph MLX CUDA runs the
# independent calls of window_warps_gpu.py side by side, which hides a lone call's latency).
# Kernel names carry W, NW and U (..._bfloat16_t_<W>_<HQ>_<HK>_<D>_<NW>_<U>); one run per
# (B, slots). Arguments: the warps and unrolls to try (default 4,8,16,32 and 1),
# and Nsight's cache control (none: as left; all: flushed before each launch, as a forward's
# keys are after the layers between).
set -e
for B in 1 8; do for S in 133 512; do
  MLX_USE_CUDA_GRAPHS=0 /usr/local/cuda/bin/ncu --cache-control ${3:-none} --clock-control none \
    --metrics gpu__time_duration.sum --csv --log-file $OUT/ww_B${B}_S${S}.csv \
    python3 bench/results/s52/device/window_warps_gpu.py --batch-sizes $B --slots $S \
    --windows 1,5,8 --warps ${1:-4,8,16,32} --unrolls ${2:-1} --n 2 --passes 1 --out /tmp/ww.json > /dev/null 2>&1
done; done
