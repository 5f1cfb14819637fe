#!/usr/bin/env bash
# s57: bench.adaptive_trace on the trained hybrid (checkpoint staged as in job_policy.sh):
# the depth the serving policy took round by round, and why. Usage: bash job_trace.sh B PROMPTS DEPTH TAG
source bench/results/s57/device/q35t.sh
PYTHONPATH=.:$PYTHONPATH timeout 580 python3 -m bench.adaptive_trace --model-dir /root/q35t \
  --batch-sizes "$1" --prompts "$2" --depth "$3" --spread 0.5 --reps 2 \
  --out "$OUT/trace_$4.json" 2>&1 | grep -v -i warning | cut -c1-600 | tail -12
