#!/usr/bin/env bash
# s61: cold_pass.py without and with the warm-up's prefill widths, each in a fresh process
# (custom CUDA kernels' builds live in a process's memory only; MLX's own kernels are cached on
# disk, so the first process also pays those). Usage: bash job_widths.sh B PROMPTS
# (As run, the JSON names all ended _0, so only each variant's last process kept its file;
# the printed lines in the README hold all four.)
source bench/results/s57/device/q35t.sh
i=0
for v in no_widths widths no_widths widths; do
  i=$((i + 1))  # (outside the pipeline: its commands run in subshells)
  PYTHONPATH=.:$PYTHONPATH timeout 200 python3 bench/results/s61/device/cold_pass.py /root/q35t "$1" "$2" \
    "$OUT/cold_${v}_b$1_$i.json" $([ $v = no_widths ] && echo no_widths) 2>&1 | grep -v -i warning | \
    grep -v '^    ' | sed "s/^/$v: /" | cut -c1-200
done
nvidia-smi --query-gpu=name --format=csv,noheader
