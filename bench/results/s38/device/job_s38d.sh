#!/usr/bin/env bash
# s38: the adaptive engine on served traffic round by round (bench.adaptive_trace, B=16, 64
# prompts of 48-144 tokens, 2 passes), each job-end choice with the rows it weighed.
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
timeout 200 python3 -m bench.adaptive_trace --model-dir $T --batch-sizes 16 --prompts 64 --spread 0.5 --reps 2 --out $OUT/trace_b16.json 2>&1 | grep -v Warning | grep -E "ratio|reasons" | cut -c1-300
