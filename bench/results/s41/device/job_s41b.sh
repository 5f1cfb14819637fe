#!/usr/bin/env bash
# s41: rows leaving and joining a launcher-thread batch without a settle (f16b470), against the
# settle before it, in one process on the same engines, in turns (bench/p5_pairs.py --ab-join):
# P5's closed batch (64 x 96 tokens) and served traffic (48-144 tokens), B = 16, adaptive MTP
# and plain; with MLX's CUDA graphs (defaults) and without (MLX_USE_CUDA_GRAPHS=0, job a).
source "$(dirname "$0")/setup.sh"
timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200
for setting in base nographs; do
  envs=""; [ $setting = nographs ] && envs="MLX_USE_CUDA_GRAPHS=0"
  for spread in 0 0.5; do
    env $envs timeout 140 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread $spread --pairs ${PAIRS:-4} --batch-sizes 16 --adaptive --ab-join --label "$setting spread=$spread" --out $OUT/join_${setting}_s${spread}.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300
  done
done
