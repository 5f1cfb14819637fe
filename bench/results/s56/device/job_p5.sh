#!/usr/bin/env bash
# s56: P5 on the hybrid job_train.sh left at /root/q35t: bench.p5_pairs as a serving worker runs
# MTP (adaptive depth up to 4, warm-up on), served traffic (96 tokens +- 50%).
# Usage: [LIMIT_S=560] bash job_p5.sh B PROMPTS TAG [extra p5_pairs args, e.g. --ab-rows-max 128, since stop 57 --ab-row-limits 32:inf,128:inf];
# LIMIT_S: the run's time limit in seconds, 280 by default (stop 57: 560, an A/B and its pairs)
source /root/mlxgpu/env.sh
export PYTHONUNBUFFERED=1
B=$1; P=$2; TAG=$3; shift 3
PYTHONPATH=.:$PYTHONPATH timeout "${LIMIT_S:-280}" python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs 4 --adaptive --depth 4 --spread 0.5 \
  --label "$TAG" --out "$OUT/p5_$TAG.json" "$@" 2>&1 | grep -v -i warning | tail -6
