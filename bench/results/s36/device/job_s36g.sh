#!/usr/bin/env bash
# s36: P5 on the final tree, 64 prompts x 96 tokens (closed batch): fixed depth 3, then adaptive (served)
source "$(dirname "$0")/setup.sh"
timeout 280 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 2 --batch-sizes 1,8,16 --label "s36 fixed d3" --out $OUT/p5_fixed_64p_s36_h200.json 2>&1 | grep -v Warning | tail -3 | cut -c1-300
timeout 280 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 2 --batch-sizes 1,8,16 --adaptive --label "s36 adaptive" --out $OUT/p5_adaptive_64p_s36_h200.json 2>&1 | grep -v Warning | tail -3 | cut -c1-300
