#!/usr/bin/env bash
# s38: depth-policy variants on served traffic (64 prompts of 48-144 tokens), each MTP pass
# after a plain pass, one process per batch size: as is, the job-end rule only once the queue
# fits in the free slots, fixed depth 3. A throwaway first process pays the machine's builds first.
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
for B in 16 8; do
  timeout 230 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 4 --batch-sizes $B --adaptive --ab-policy as_is,job_end_drain_only,fixed --out $OUT/variants_c_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-400
done
