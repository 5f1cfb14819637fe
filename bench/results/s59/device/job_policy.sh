#!/usr/bin/env bash
# s59: depth-policy variants against plain on the trained hybrid, in turns in one process
# (bench.p5_pairs --ab-policy), served traffic (96 tokens +- 50%), more pairs than stop 57's
# job_policy.sh (4 pairs left +-10% on a median). The checkpoint as in stop 57's q35t.sh.
# Usage: bash job_policy.sh B PROMPTS DEPTH PAIRS TAG VARIANTS [SECONDS]
set -o pipefail  # a timeout (124) is the job's exit status, not tail's 0
source bench/results/s57/device/q35t.sh
B=$1; P=$2; D=$3; N=$4; TAG=$5; V=$6; T=${7:-580}
PYTHONPATH=.:$PYTHONPATH timeout "$T" python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs "$N" --adaptive --depth "$D" --spread 0.5 \
  --ab-policy "$V" --label "$TAG" --out "$OUT/policy_$TAG.json" 2>&1 | grep -v -i warning | tail -4
