#!/usr/bin/env bash
# s66: the embedded default model (dense qwen3, 10 layers, hidden 256, its MTP head) as a worker
# serves it on MLX CUDA: bench.p5_pairs, plain and adaptive MTP (up to 4) in pairs, served
# traffic (96 tokens +- 50%), B = 16, 1, 8. After the first three staging runs (carry .gpu2).
source .gpu2/finish.sh >/dev/null
export PYTHONUNBUFFERED=1
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o "H[0-9]*" | head -1 | tr H h)
for spec in "16 64" "1 16" "8 32"; do
  set -- $spec
  PYTHONPATH=.:$PYTHONPATH timeout 150 python3 -m bench.p5_pairs --model-dir workers/default_model/target \
    --batch-sizes $1 --prompts $2 --pairs 4 --adaptive --depth 4 --spread 0.5 \
    --label "s66_default_b$1_$card" --out "$OUT/default_mtp_b$1_$card.json" 2>&1 | grep -v -i warning | tail -2
done
nvidia-smi --query-gpu=name --format=csv,noheader
