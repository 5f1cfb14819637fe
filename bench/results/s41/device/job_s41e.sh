#!/usr/bin/env bash
# s41: the join change in its final form (a718623: joins queue their evaluations behind the
# round, no hand-off wait) on ÷ off in one process, on the same engines, in turns, where off is
# the code before it (collect, leave and admit unrouted, after a settle): bench/p5_pairs.py
# --ab-join, P5's closed batch (64 x 96 tokens) and served traffic (48-144 tokens), B = 16,
# adaptive MTP and plain. (Job b's off arm still queued the prefill on the launcher.)
source "$(dirname "$0")/setup.sh"
timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200
for spread in 0 0.5; do
  timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread $spread --pairs ${PAIRS:-5} --batch-sizes 16 --adaptive --ab-join --label "final spread=$spread" --out $OUT/join_final_s${spread}.json 2>&1 | grep -v Warning | tail -1 | cut -c1-300
done
