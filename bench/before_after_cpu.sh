#!/usr/bin/env bash
# Two trees in turns on the CPU, each with its own MLX kernel cache: plain ÷ BatchGenerator
# (bench/engine.py), efficiency with the always-right drafter (bench.gpu tiny), 2 passes each;
# then the demo (bench.demo_ab, 2 repeats). What a change to the engine's hot path reruns.
#   bench/before_after_cpu.sh BEFORE_DIR AFTER_DIR OUT_DIR   (each tree a checkout or worktree)
set -u
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
PY=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
declare -A TREE=([before]=$1 [after]=$2)
O=$3
mkdir -p "$O/tmp_before" "$O/tmp_after"
run() {  # side, then the command's arguments
  local side=$1; shift
  (cd "${TREE[$side]}" && TMPDIR=$O/tmp_$side PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=${TREE[$side]} timeout 900 "$PY" "$@")
}
for pass in 1 2; do
  for side in before after; do
    run "$side" bench/engine.py --batch-sizes 1,8 --max-tokens 32 --no-slow-draft --skip-context --out "$O/engine_${side}_$pass.json" > "$O/engine_${side}_$pass.log" 2>&1
    run "$side" -m bench.gpu --presets tiny --batch-sizes 1,8 --repeats 3 --skip-default --out "$O/gpu_tiny_${side}_$pass.json" > "$O/gpu_${side}_$pass.log" 2>&1
    echo "$pass $side done $(date +%T)"
  done
done
(cd "${TREE[after]}" && PYTHONPATH=. timeout 1500 "$PY" -m bench.demo_ab --before "${TREE[before]}" --after . --repeats 2 --own-kernel-cache --out "$O/demo_ab.json" > "$O/demo_ab.log" 2>&1)
echo ALLDONE "$(date +%T)"
