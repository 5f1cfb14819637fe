#!/usr/bin/env bash
# s41: P5 after f16b470 (rows leave and join without a settle): adaptive MTP ÷ plain in pairs at
# B = 1 and 4 (16 prompts) and 8 and 16 (64 prompts), served traffic (48-144 tokens) and the
# closed batch (96 each) at 8 and 16 (bench/p5_pairs.py); then what the device runs per step
# class in the closed batch at B = 16 (bench/step_kernels.py, stop 40's job a again).
source "$(dirname "$0")/setup.sh"
timeout 100 python3 -m bench.p5_pairs --model-dir $T --prompts 8 --pairs 1 --batch-sizes 8 --adaptive --out /tmp/warm.json 2>&1 | grep -v Warning | tail -1 | cut -c1-200
timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 16 --pairs 3 --batch-sizes 1,4 --adaptive --spread 0.5 --label "served 16p" --out $OUT/p5_served_b1_4.json 2>&1 | grep -v Warning | tail -2 | cut -c1-300
timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 3 --batch-sizes 8,16 --adaptive --spread 0.5 --label "served 64p" --out $OUT/p5_served_b8_16.json 2>&1 | grep -v Warning | tail -2 | cut -c1-300
timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --pairs 3 --batch-sizes 8,16 --adaptive --label "closed 64p" --out $OUT/p5_closed_b8_16.json 2>&1 | grep -v Warning | tail -2 | cut -c1-300
timeout 200 python3 -m bench.step_kernels --model-dir $T --batch-size 16 --spread 0 --engines plain,mtp_fixed --out $OUT/step_kernels_b16.json 2>&1 | grep -v -i "warning\|USDT" | tail -60
