#!/usr/bin/env bash
# s56: which primitives a hybrid round encodes on MLX CUDA (random Qwen3.5-shape peer, bf16),
# plain against MTP at depth 3, and the MTP round's encoding by part at B = 16.
# Usage: bash job_ops.sh (after MLX's CUDA staging)
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:$PYTHONPATH
[ -d /root/q35 ] || python3 -m bench.peer_model --out /root/q35 --dtype bfloat16 2>&1 | tail -2
timeout 200 python3 -m bench.graph_ops --model-dir /root/q35 --batch-sizes 4,16 --prompts 32 --top 200 \
  --out "$OUT/graph_ops_h200.json" 2>&1 | grep -v -i warning | cut -c1-300
timeout 150 python3 -m bench.round_split --model-dir /root/q35 --batch-size 16 --prompts 32 \
  --drafter mtp --depth 3 --parts --out "$OUT/split_b16_mtp_parts_h200.json" 2>&1 | grep -v -i warning | tail -1
nvidia-smi --query-gpu=name --format=csv,noheader
