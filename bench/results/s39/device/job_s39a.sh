#!/usr/bin/env bash
# s39: where the adaptive engine's gap to fixed depth at B=16 lies, in one process on served
# traffic (64 prompts of 48-144 tokens, each MTP pass after a plain pass): as is; forced_max
# (every round at depth 3 with the policy's per-round and per-join host work: against fixed,
# what that work costs; against as_is, what the choices cost); no job-end rule; fixed depth 3.
# A throwaway first process pays the machine's builds first.
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
for B in ${BS:-16}; do
  timeout ${TMO:-400} python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs ${PAIRS:-4} --batch-sizes $B --adaptive --ab-policy ${VARIANTS:-as_is,forced_max,no_job_end,fixed} --out $OUT/variants_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-500
done
