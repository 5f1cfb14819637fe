#!/usr/bin/env bash
# s66: the demo's batch job, no drafter and MTP in alternation (PAIRS pairs, default 5), each its
# own `specfleet up --batch` as `./run demo` runs it, to tell a real MTP deficit in the two-worker
# cluster from run-to-run noise. Usage: bash batch_pairs_cpu.sh [PAIRS] > out.jsonl
set -euo pipefail
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4
export BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "${1:-5}"); do
  for arm in plain mtp; do
    extra=()
    [ "$arm" = mtp ] && extra=(--drafter mtp)
    .venv/bin/python -m cluster.cli up --workers 2 --draft-depth 3 --gateway-port 0 \
      --batch workers/default_model/heldout_prompts.jsonl -o "$tmp/$arm.jsonl" \
      --summary-json "$tmp/$arm.json" "${extra[@]}" > /dev/null 2>&1
    rm -f "$tmp/$arm.jsonl" "$tmp/$arm.errors.jsonl"
    .venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'pair': $i, 'arm': '$arm', 'tokens_per_s': round(d['tokens_per_s'], 1), 'elapsed_s': round(d['elapsed_s'], 3), 'mean_acceptance_length': d.get('mean_acceptance_length')}))" "$tmp/$arm.json"
  done
done
