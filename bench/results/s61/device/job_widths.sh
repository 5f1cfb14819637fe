#!/usr/bin/env bash
# s61: cold_pass.py without and with the warm-up's prefill widths, each in a fresh process
# (custom CUDA kernels' builds live in a process's memory only; MLX's own kernels are cached on
# disk, so the first process also pays those). Usage: bash job_widths.sh B PROMPTS
source bench/results/s57/device/q35t.sh
for v in no_widths widths no_widths widths; do
  PYTHONPATH=.:$PYTHONPATH timeout 200 python3 bench/results/s61/device/cold_pass.py /root/q35t "$1" "$2" \
    "$OUT/cold_${v}_b$1_$((i++)).json" $([ $v = no_widths ] && echo no_widths) 2>&1 | grep -v -i warning | \
    grep -v '^    ' | sed "s/^/$v: /" | cut -c1-200
done
nvidia-smi --query-gpu=name --format=csv,noheader
