#!/usr/bin/env bash
# before (234756a, stop 34's head) / after (HEAD) in turns on the CPU, each tree its own MLX kernel
# cache: bench/engine.py, 3 passes each (stop 34 left a 6-10% B = 8 drop there unresolved)
set -u
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
declare -A TREE=([before]=/tmp/wt_234756a [after]=/work/main)
[ -d /tmp/wt_234756a ] || git -C /work/main worktree add -q /tmp/wt_234756a 234756a
mkdir -p /tmp/s35/ba/tmp_before /tmp/s35/ba/tmp_after
for pass in 1 2 3; do
  for side in before after; do
    t=${TREE[$side]}
    (cd $t && TMPDIR=/tmp/s35/ba/tmp_$side PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=$t timeout 600 /work/main/.venv/bin/python bench/engine.py --batch-sizes 1,8 --max-tokens 32 --no-slow-draft --skip-context --out /tmp/s35/ba/final_engine_${side}_$pass.json > /tmp/s35/ba/final_engine_${side}_$pass.log 2>&1)
    echo "$pass $side done $(date +%T)"
  done
done
echo ALLDONE
