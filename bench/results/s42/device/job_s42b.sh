#!/usr/bin/env bash
# s42: a second self-distillation round (train/self_distill.py) continuing job a's head B
# (generated rows only): fresh continuations (seed 1), the chain trained to depth 4, 8000 steps.
# Needs .gpu4/corpus.npz and .gpu4/mtp_B.safetensors (job a's head B) carried.
source /root/mlxgpu/env.sh
rm -rf /root/t42 && cp -r . /root/t42 && cd /root/t42
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
rm -rf /root/sdC && cp -r workers/default_model /root/sdC && cp .gpu4/mtp_B.safetensors /root/sdC/target/mtp.safetensors
timeout 540 python3 -m train.self_distill --out /root/sdC --corpus .gpu4/corpus.npz --sequences 32768 \
  --gen-batch 1024 --share 1.0 --seed 1 --mtp-depth 4 --mtp-steps 8000 --mtp-batch 32 --mtp-lr 1e-3 \
  --weight-decay 0.1 2>&1 | grep -v Warning | awk 'NR % 40 == 1 || /generated|written|Error|error/' | cut -c1-400
cp /root/sdC/target/mtp.safetensors $OUT/mtp_C.safetensors
cp /root/sdC/train_summary.json $OUT/train_summary_C.json
