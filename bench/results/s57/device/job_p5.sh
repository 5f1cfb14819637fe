#!/usr/bin/env bash
# s57: P5 on the hybrid job_train.sh left at /root/q35t, as s56's job_p5.sh (adaptive depth up
# to 4, warm-up on, served traffic 96 tokens +- 50%), with a longer limit for an A/B and its
# pairs in one process.
# Usage: bash job_p5.sh B PROMPTS TAG [extra p5_pairs args, e.g. --ab-row-limits 32:inf,64:48]
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1
B=$1; P=$2; TAG=$3; shift 3
PYTHONPATH=.:$PYTHONPATH timeout 560 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs 4 --adaptive --depth 4 --spread 0.5 \
  --label "$TAG" --out "$OUT/p5_$TAG.json" "$@" 2>&1 | grep -v -i warning | tail -6
