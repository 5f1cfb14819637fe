#!/usr/bin/env bash
# s39: where the closed batch's time goes (64 prompts x 96 tokens, B=16): bench.join_split
# (plain, adaptive MTP, fixed depth 3; the second pass; join steps against the rest).
source "$(dirname "$0")/setup.sh"
timeout 200 python3 -m bench.join_split --model-dir $T --batch-sizes 16 --spread 0 --fixed --out $OUT/join_closed_b16.json 2>&1 | grep -v Warning | grep pass1 | cut -c1-700
