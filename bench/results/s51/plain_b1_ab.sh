#!/usr/bin/env bash
# Stop 51: plain_b1.py in each tree in turns, REPS times: plain_b1_ab.sh REPS OUT.jsonl NAME=TREE...
set -u
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$HERE/../../../.venv/bin/python
REPS=$1 OUT=$2; shift 2
for rep in $(seq "$REPS"); do
  for pair in "$@"; do
    name=${pair%%=*} tree=${pair#*=}
    (cd "$tree" && PYTHONPATH=$tree "$PY" "$HERE/plain_b1.py" "$name") >> "$OUT"
  done
done
