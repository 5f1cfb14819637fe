#!/usr/bin/env bash
# s56: the join gate (workers/join_gate.py) off and on in turns, on the random Qwen3.5-shape
# hybrid (bf16; its head accepts less than the trained one's), as a serving worker runs it
# (adaptive depth up to 4, warm-up on), served traffic (96 tokens +- 50%).
# Usage: bash job_gate.sh (after MLX's CUDA staging)
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.:$PYTHONPATH
[ -d /root/q35 ] || python3 -m bench.peer_model --out /root/q35 --dtype bfloat16 2>&1 | tail -1
for spec in "16 64" "8 32"; do
  set -- $spec
  timeout 200 python3 -m bench.p5_pairs --model-dir /root/q35 --batch-sizes "$1" --prompts "$2" \
    --pairs 4 --adaptive --depth 4 --spread 0.5 --ab-join-gate --label "gate_b$1" \
    --out "$OUT/gate_random_b$1_h200.json" 2>&1 | grep -v -i warning | tail -2
done
nvidia-smi --query-gpu=name --format=csv,noheader
