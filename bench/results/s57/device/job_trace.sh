#!/usr/bin/env bash
# s57: bench.adaptive_trace on the trained hybrid (checkpoint staged as in job_policy.sh):
# the depth the serving policy took round by round, and why. Usage: bash job_trace.sh B PROMPTS DEPTH TAG
[ -f /root/mlxgpu/env.sh ] || source .gpu2/finish.sh
source /root/mlxgpu/env.sh
if [ ! -f /root/q35t/model.safetensors ]; then
  mkdir -p /root/q35t && cp .gpu4b/*.json .gpu4b/mtp.safetensors /root/q35t/
  cat /root/q35parts/model.part.aa /root/q35parts/model.part.ab .gpu4b/model.part.ac > /root/q35t/model.safetensors
fi
export PYTHONUNBUFFERED=1
PYTHONPATH=.:$PYTHONPATH timeout 580 python3 -m bench.adaptive_trace --model-dir /root/q35t \
  --batch-sizes "$1" --prompts "$2" --depth "$3" --spread 0.5 --reps 2 \
  --out "$OUT/trace_$4.json" 2>&1 | grep -v -i warning | cut -c1-600 | tail -12
