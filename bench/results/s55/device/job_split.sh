#!/usr/bin/env bash
# s55: where an MTP round's host time goes on the hybrid (random Qwen3.5-shape peer, bf16, the
# shape P5's trained hybrid has), against a plain step: bench.round_split and bench.graph_ops.
# Usage: bash job_split.sh (after MLX's CUDA staging)
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:$PYTHONPATH
[ -d /root/q35 ] || python3 -m bench.peer_model --out /root/q35 --dtype bfloat16 2>&1 | tail -2
for B in 4 16; do
  for d in none mtp; do
    python3 -m bench.round_split --model-dir /root/q35 --batch-size $B --prompts $((B * 2)) \
      --drafter $d --depth 3 --out "$OUT/split_b${B}_${d}_h200.json" 2>&1 | grep -v -i warning | tail -1
  done
  python3 -m bench.round_split --model-dir /root/q35 --batch-size $B --prompts $((B * 2)) \
    --drafter mtp --depth 3 --parts --out "$OUT/split_b${B}_mtp_parts_h200.json" 2>&1 | grep -v -i warning | tail -1
done
python3 -m bench.graph_ops --model-dir /root/q35 --batch-sizes 4,16 --prompts 32 --top 80 \
  --out "$OUT/graph_ops_h200.json" 2>&1 | grep -v -i warning | cut -c1-300
nvidia-smi --query-gpu=name --format=csv,noheader
