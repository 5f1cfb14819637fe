#!/usr/bin/env bash
# Stop 53, device job E: after the merge fix (C <= warps) and the register cap, the window
# kernel per call and at each cap, then P1/P2 on this tree's defaults.
set -u
export PYTHONPATH=.:$PYTHONPATH
timeout 150 python3 bench/results/s53/device/kernel_ab_gpu.py micro --out $OUT/kernel_micro_fixed_h200.json | tail -1
python3 -m bench.gpu --presets 6b,1b --batch-sizes 1,8,32 --repeats 3 --skip-default --out $OUT/gpu_fixed_h200.json
