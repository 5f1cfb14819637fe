#!/usr/bin/env bash
# s36: P1 / P2 on the final tree after the settle change (random Qwen3 6.6B, bf16)
source "$(dirname "$0")/setup.sh"
timeout 560 python3 -m bench.gpu --presets 6b --batch-sizes 1,8,32 --repeats 3 --skip-default --out $OUT/gpu_6b_s36_h200.json 2>&1 | grep -v Warning | tail -12 | cut -c1-300
