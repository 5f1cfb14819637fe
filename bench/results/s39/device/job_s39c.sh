#!/usr/bin/env bash
# s39: joins that wait (workers/join_wait.py) on the closed batch (64 x 96 tokens) and on served
# traffic (48-144 tokens), each pass after a plain pass without it; plain with it, too.
source "$(dirname "$0")/setup.sh"
V=as_is,join_wait,plain_join_wait
for B in 16 8; do
  timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 3 --batch-sizes $B --adaptive --ab-policy $V --out $OUT/closed_wait_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-500
done
timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes 16 --adaptive --ab-policy $V --out $OUT/served_wait_b16.json 2>&1 | grep -v Warning | tail -1 | cut -c1-500
