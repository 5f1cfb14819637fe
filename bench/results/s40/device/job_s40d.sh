#!/usr/bin/env bash
# s40: MLX CUDA's graph settings against the host-bound rounds (bench/step_kernels.py: the device
# runs kernels ~15% of a step). Per setting, a process of its own (MLX reads them once): P5's
# closed batch (64 x 96 tokens) and served traffic (48-144 tokens), B = 16, adaptive MTP and
# plain in pairs (bench/p5_pairs.py). MLX_MAX_OPS_PER_BUFFER: kernels per CUDA graph before it
# is launched; MLX_USE_CUDA_GRAPHS=0: kernels launched one by one, no graphs.
source "$(dirname "$0")/setup.sh"
[ -n "${SKIP_WARM:-}" ] || (timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
for setting in ${SETTINGS:-base ops100 ops200 nographs}; do
  case $setting in
    base) envs="";; ops*) envs="MLX_MAX_OPS_PER_BUFFER=${setting#ops}";; nographs) envs="MLX_USE_CUDA_GRAPHS=0";;
  esac
  for spread in 0 0.5; do
    env $envs timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread $spread --pairs ${PAIRS:-3} --batch-sizes ${B:-16} --adaptive --label "$setting spread=$spread" --out $OUT/graphs${RUN:-}_${setting}_s${spread}.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['batch']['${B:-16}']; print('   mtp tok/s', r['mtp_tokens_per_s'])" $OUT/graphs${RUN:-}_${setting}_s${spread}.json
  done
done
