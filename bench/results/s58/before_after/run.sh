#!/bin/bash
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 BLIS_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for rep in 1 2; do
 for t in before after; do
  cd /tmp/ba_$t
  PYTHONPATH=. .venv/bin/python bench/engine.py --batch-sizes 1,8 --skip-context --no-slow-draft --prompts 16 --max-tokens 64 --out /tmp/bench58/engine_${t}_$rep.json > /tmp/bench58/engine_${t}_$rep.log 2>&1
  PYTHONPATH=. .venv/bin/python bench/gpu.py --presets tiny --batch-sizes 1,8 --skip-default --repeats 3 --out /tmp/bench58/gpu_${t}_$rep.json > /tmp/bench58/gpu_${t}_$rep.log 2>&1
 done
done
for rep in 1 2; do
 for t in before after; do
  cd /tmp/ba_$t
  PYTHONPATH=. .venv/bin/python -m cluster.cli demo --out-dir /tmp/bench58/demo_${t}_$rep > /tmp/bench58/demo_${t}_$rep.log 2>&1
 done
done
echo DONE > /tmp/bench58/done
