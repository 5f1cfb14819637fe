#!/usr/bin/env bash
# s60: the wide kernel (workers/skinny_linear.py in blocks of 8 rows) for the per-row route's
# refused calls: its CUDA tests, then P5's A/B at B (cap 4) with it off and on in turns in one
# process (bench.p5_pairs --ab-row-limits 64:48:0,64:48:128), trained hybrid staged as in stop
# 57's q35t.sh. Needs bench/results/s60/wide_kernel.patch applied (not kept in the tree).
# Usage: bash job_wide.sh B PROMPTS PAIRS TAG
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 150 python3 - <<'PY' 2>&1 | grep -v -i warning | tail -4
# the CUDA kernel tests, called directly (the device machine may have no pytest)
import itertools, sys, types
try:
    import pytest  # noqa: F401
except ImportError:  # its marks as no-op decorators: the functions are called directly here
    class _Mark:
        def __getattr__(self, name):
            return lambda *a, **k: (lambda f: f)
    sys.modules["pytest"] = types.SimpleNamespace(mark=_Mark())
from tests.workers.engine import test_skinny_linear as t
for M, shape in itertools.product([2, 5, 8], [(1024, 2048), (1000, 520)]):
    t.test_kernel_matches_fp32_reference_and_each_row_is_the_one_row_call(M, shape)
for M, shape in itertools.product([9, 40, 80], [(1024, 384), (384, 1024), (2048, 384)]):
    t.test_blocked_kernel_matches_fp32_reference_and_each_row_is_the_two_row_call(M, shape)
print("kernel tests passed")
PY
PYTHONPATH=.:$PYTHONPATH timeout 400 python3 -m bench.p5_pairs --model-dir /root/q35t \
  --batch-sizes "$1" --prompts "$2" --pairs "$3" --adaptive --depth 4 --spread 0.5 \
  --ab-row-limits 64:48:0,64:48:128 --label "$4" --out "$OUT/p5_$4.json" 2>&1 | grep -v -i warning | tail -6
