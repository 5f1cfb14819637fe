#!/usr/bin/env bash
# Stop 53, device job A: U x skinny rounds, then P1/P2 with skinny A/B (H200).
set -u
python3 -c 'import subprocess; print(subprocess.run(["nvidia-smi","--query-gpu=name,clocks.sm,clocks.max.sm","--format=csv"],capture_output=True,text=True).stdout)'
PYTHONPATH=.:$PYTHONPATH timeout 240 python3 bench/results/s53/device/unroll_rounds_gpu.py --presets 1b,6b --batch-sizes 1,8 --out $OUT/unroll_rounds_h200.json
PYTHONPATH=.:$PYTHONPATH python3 -m bench.gpu --presets 6b,1b --batch-sizes 1,8,32 --repeats 3 --skip-default --ab-skinny --out $OUT/gpu_ab_skinny_h200.json
