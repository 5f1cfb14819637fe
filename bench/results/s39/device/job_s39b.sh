#!/usr/bin/env bash
# s39: the closed batch P5 names (64 prompts x 96 tokens, all equal; no spread), adaptive as
# is (hold_depth), as before this stop (no_hold) and fixed depth 3, each after a plain pass.
source "$(dirname "$0")/setup.sh"
for B in ${BS:-16 8}; do
  timeout ${TMO:-250} python3 -m bench.p5_pairs --model-dir $T --prompts ${PROMPTS:-64} --pairs ${PAIRS:-3} --batch-sizes $B --adaptive --ab-policy ${VARIANTS:-as_is,no_hold,fixed} --out $OUT/closed_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-500
done
