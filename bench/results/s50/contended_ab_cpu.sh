#!/bin/bash
# Stop 50: one worker's share of the demo's batch job (32 held-out prompts, B=16, 64 tokens) in
# two processes at once, each the other half's worker, as `./run demo`'s two workers contend for
# the VM's two cores; one engine configuration a pair, configurations in turns (order reversed
# every other rep). Appends a JSON line a pair to OUT.
#   usage: bash bench/results/s50/contended_ab_cpu.sh REPS NAME,NAME,... OUT.jsonl [BEFORE]
#   NAME: plain | adaptive (as a demo worker serves) | held0 (the same, held at depth 0) | hold
#   (the same, hold_depth on; stop 59, so no b-hold in a tree before it) | kN (fixed depth N) |
#   mgNN (adaptive with the policy's min_gain at NN / 100; stop 63);
#   b-NAME: the same in the tree BEFORE (a git worktree with .venv linked to this one's)
cd "$(dirname "$0")/../../.."
OUT=$(realpath -m "$3")
BEFORE=${4:-}
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=.
IFS=, read -ra NAMES <<< "$2"
for rep in $(seq 1 $1); do
  if (( rep % 2 )); then ORDER=("${NAMES[@]}"); else ORDER=($(printf '%s\n' "${NAMES[@]}" | tac)); fi
  for n in "${ORDER[@]}"; do
    at=$(python3 -c "import time; print(time.time() + 20)")
    tree=.; name=$n
    if [[ $n == b-* ]]; then tree=$BEFORE; name=${n#b-}; fi
    (cd $tree && PYTHONPATH=. .venv/bin/python bench/results/s50/contended_job_cpu.py $name 0 $at > $OUT.a 2>/dev/null) &
    (cd $tree && PYTHONPATH=. .venv/bin/python bench/results/s50/contended_job_cpu.py $name 1 $at > $OUT.b 2>/dev/null) &
    wait
    echo "{\"rep\": $rep, \"tag\": \"$n\", \"a\": $(cat $OUT.a), \"b\": $(cat $OUT.b)}" | tee -a $OUT
  done
done
rm -f $OUT.a $OUT.b
