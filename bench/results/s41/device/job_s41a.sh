#!/usr/bin/env bash
# s41: stop 40's one unrepeated reading, MLX CUDA graphs off (MLX_USE_CUDA_GRAPHS=0: kernels
# launched one by one), against the defaults, twice with the order reversed. Per setting a
# process of its own (MLX reads it once): P5's closed batch (64 x 96 tokens) and served traffic
# (48-144 tokens), B = 16, adaptive MTP and plain in pairs (bench/p5_pairs.py).
source "$(dirname "$0")/setup.sh"
timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200
for run in 1 2; do
  order="nographs base"; [ $run = 2 ] && order="base nographs"
  for setting in $order; do
    envs=""; [ $setting = nographs ] && envs="MLX_USE_CUDA_GRAPHS=0"
    for spread in 0 0.5; do
      env $envs timeout 120 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread $spread --pairs ${PAIRS:-4} --batch-sizes 16 --adaptive --label "$setting spread=$spread run=$run" --out $OUT/graphs${run}_${setting}_s${spread}.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300
    done
  done
done
