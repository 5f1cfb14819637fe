#!/usr/bin/env bash
# s64: the 6.6B verify's split at B = 1 on this tree, with the engine's linear routes
# (bench.verify_parts --routes: synced, pipelined, build and encode timings, part by part).
# After MLX's CUDA staging (../shared/tools/mlx-cuda-pack; later runs: source /root/mlxgpu/env.sh).
PYTHONPATH=.:$PYTHONPATH timeout 500 python3 -m bench.verify_parts --routes --repeats 3 \
  --out "$OUT/verify_parts_routes_6b_h200.json" 2>&1 | grep -v -i warning | tail -30
nvidia-smi --query-gpu=name --format=csv,noheader
