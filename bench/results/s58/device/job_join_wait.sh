#!/usr/bin/env bash
# s58 (for the next device run): P5 pairs with waiting rows joining at once (0) and held up to
# WAIT steps to join several at a time (workers/join_gate.py), in turns in one process
# (bench.p5_pairs --ab-join-wait), served traffic (96 tokens +- 50%), adaptive depth up to 4.
# The checkpoint as in stop 57's job_policy.sh (bench/results/s57/device/q35t.sh).
# Usage: bash job_join_wait.sh B PROMPTS WAIT TAG
source bench/results/s57/device/q35t.sh
B=$1; P=$2; W=$3; TAG=$4
PYTHONPATH=.:$PYTHONPATH timeout 580 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$B" --prompts "$P" --pairs 4 --adaptive --depth 4 --spread 0.5 \
  --ab-join-wait "0,$W" --label "$TAG" --out "$OUT/join_wait_$TAG.json" 2>&1 |
  grep -v -i warning | tail -4
