#!/usr/bin/env bash
# before (e442c61) / after (HEAD) in turns, each tree its own MLX kernel cache
set -u
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
declare -A TREE=([before]=/tmp/wt_e442 [after]=/work/main)
mkdir -p /tmp/s34/ba/tmp_before /tmp/s34/ba/tmp_after
for pass in 1 2; do
  for side in before after; do
    t=${TREE[$side]}
    (cd $t && TMPDIR=/tmp/s34/ba/tmp_$side PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=$t timeout 600 /work/main/.venv/bin/python bench/engine.py --batch-sizes 1,8 --max-tokens 32 --no-slow-draft --skip-context --out /tmp/s34/ba/engine_${side}_$pass.json > /tmp/s34/ba/engine_${side}_$pass.log 2>&1)
    (cd $t && TMPDIR=/tmp/s34/ba/tmp_$side PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=$t timeout 600 /work/main/.venv/bin/python -m bench.gpu --presets tiny --batch-sizes 1,8 --repeats 3 --skip-default --out /tmp/s34/ba/gpu_tiny_${side}_$pass.json > /tmp/s34/ba/gpu_${side}_$pass.log 2>&1)
    echo "$pass $side done $(date +%T)"
  done
done
echo ALLDONE
