#!/usr/bin/env bash
# s38: the drained sizes at their own drafting-to-plain ratio (as_is, this tree) against caps
# alone (cap_costs_only) and fixed depth 3, served traffic at B=16, each after a plain pass.
source "$(dirname "$0")/setup.sh"
timeout 265 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes 16 --adaptive --ab-policy as_is,cap_costs_only,fixed --out $OUT/variants_f_b16.json 2>&1 | grep -v Warning | tail -1 | cut -c1-400
