#!/usr/bin/env bash
# s57: adaptive depth against fixed depth on the trained hybrid, in turns in one process
# (bench.p5_pairs --ab-policy), served traffic (96 tokens +- 50%). The checkpoint comes back in
# parts as in job_join_split.sh (assembled once per machine).
# Usage: bash job_policy.sh B PROMPTS DEPTH TAG VARIANTS
[ -f /root/mlxgpu/env.sh ] || source .gpu2/finish.sh
source /root/mlxgpu/env.sh
if [ ! -f /root/q35t/model.safetensors ]; then
  mkdir -p /root/q35t && cp .gpu4b/*.json .gpu4b/mtp.safetensors /root/q35t/
  cat /root/q35parts/model.part.aa /root/q35parts/model.part.ab .gpu4b/model.part.ac > /root/q35t/model.safetensors
fi
export PYTHONUNBUFFERED=1
B=$1; P=$2; D=$3; TAG=$4; V=$5
PYTHONPATH=.:$PYTHONPATH timeout 580 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs 4 --adaptive --depth "$D" --spread 0.5 \
  --ab-policy "$V" --label "$TAG" --out "$OUT/policy_$TAG.json" 2>&1 | grep -v -i warning | tail -4
