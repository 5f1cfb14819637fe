#!/usr/bin/env bash
# s57: adaptive depth against fixed depth on the trained hybrid, in turns in one process
# (bench.p5_pairs --ab-policy), served traffic (96 tokens +- 50%). The checkpoint comes back in
# parts as in job_join_split.sh (assembled once per machine).
# Usage: bash job_policy.sh B PROMPTS DEPTH TAG VARIANTS
source bench/results/s57/device/q35t.sh
B=$1; P=$2; D=$3; TAG=$4; V=$5
PYTHONPATH=.:$PYTHONPATH timeout 580 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs 4 --adaptive --depth "$D" --spread 0.5 \
  --ab-policy "$V" --label "$TAG" --out "$OUT/policy_$TAG.json" 2>&1 | grep -v -i warning | tail -4
