#!/usr/bin/env bash
# s35: the depth policy's cap_by_larger off/on in one process, adaptive as served, with fixed depth 3;
# 64 prompts of 48-144 tokens, B=16 (trained hybrid)
source "$(dirname "$0")/setup.sh"
timeout 560 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 4 --batch-sizes 16 --adaptive --ab-policy --label "s35 policy cap_by_larger off/on, 64 prompts, spread 0.5" --out $OUT/p5_policy_cap_ab_b16_s35_h200.json 2>&1 | grep -v Warning | tail -3
