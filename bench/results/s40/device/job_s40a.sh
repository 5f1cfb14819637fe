#!/usr/bin/env bash
# s40: what the device does in each step of P5's closed batch (64 prompts x 96 tokens, B = 16):
# join steps, the step after each join and the other rounds, for plain, MTP at fixed depth 3
# and adaptive MTP (bench/step_kernels.py: CUPTI through torch.profiler, the second pass).
source "$(dirname "$0")/setup.sh"
(timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200)
timeout ${TMO:-420} python3 -m bench.step_kernels --model-dir $T --batch-size ${B:-16} --spread ${SPREAD:-0} --engines ${ENGINES:-plain,mtp_fixed,mtp} --out $OUT/step_kernels_b${B:-16}.json 2>&1 | grep -v -i "warning\|USDT" | tail -250
