#!/usr/bin/env bash
# s38: join steps of plain, adaptive MTP and fixed-depth-3 MTP on served traffic (bench.join_split
# --fixed, B=16, 64 prompts of 48-144 tokens), as run and with joins synced.
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
for sync in "" "--sync-joins"; do
  timeout 150 python3 -m bench.join_split --model-dir $T --batch-sizes 16 --fixed $sync --out $OUT/join_fixed${sync:+_synced}.json 2>&1 | grep -v Warning | grep pass1 | cut -c1-600
done
