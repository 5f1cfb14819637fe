#!/usr/bin/env bash
# s40: how many kernels an MTP round and a plain step launch, and which (closed batch, B = 16):
# bench/step_kernels.py with launch counts, and bench/graph_ops.py's primitives per round.
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
timeout 300 python3 -m bench.step_kernels --model-dir $T --batch-size 16 --spread 0 --top 40 --engines mtp_fixed,plain --out $OUT/step_kernels_counts_b16.json 2>&1 | grep -c .
timeout 200 python3 -m bench.graph_ops --model-dir $T --batch-sizes 16 --prompts 16 --max-tokens 96 --depth 3 --top 60 --out $OUT/graph_ops_b16.json 2>&1 | grep -v -i warning | cut -c1-300
