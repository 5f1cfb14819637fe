#!/usr/bin/env bash
# s42: a third self-distillation round from the shipped head C, scoring only chain starts whose
# inputs are generated (--score-prompt 0), fresh continuations (seed 2), depth 4, 6000 steps.
# Needs .gpu4/corpus.npz carried. Ran on a branch with round3_score_prompt.diff applied (the
# --score-prompt flag); not merged: head D drafted worse than C (README section 6).
source /root/mlxgpu/env.sh
rm -rf /root/t42 && cp -r . /root/t42 && cd /root/t42
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /root/sdD && cp -r workers/default_model /root/sdD
timeout 500 python3 -m train.self_distill --out /root/sdD --corpus .gpu4/corpus.npz --sequences 32768 \
  --gen-batch 1024 --seed 2 --score-prompt 0 --mtp-depth 4 --mtp-steps 6000 --mtp-batch 32 \
  --mtp-lr 1e-3 2>&1 | grep -v Warning | awk 'NR % 40 == 1 || /continuations|written|Error|error/' | cut -c1-400
cp /root/sdD/target/mtp.safetensors $OUT/mtp_D.safetensors
cp /root/sdD/train_summary.json $OUT/train_summary_D.json
