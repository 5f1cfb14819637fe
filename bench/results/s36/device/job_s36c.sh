#!/usr/bin/env bash
# s36: P5 as defined (closed batch, all rows equal) and served (adaptive), B=1,4,8,16, trained hybrid
source "$(dirname "$0")/setup.sh"
timeout 560 python3 -m bench.p5_pairs --model-dir $T --pairs 2 --batch-sizes 1,4,8,16 --adaptive --label "s36 served" --out $OUT/p5_adaptive_s36_h200.json 2>&1 | grep -v Warning | tail -5 | cut -c1-400
