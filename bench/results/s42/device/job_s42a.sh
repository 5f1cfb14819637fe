#!/usr/bin/env bash
# s42: self-distil the default model's MTP head (train/self_distill.py) on one lent GPU, two
# variants from one set of greedy continuations: A mixes 3/4 generated rows with 1/4 corpus
# windows per batch, B trains on generated rows alone. Both continue the shipped head with the
# shipped recipe's weight decay; the heads come back in $OUT and are evaluated on the CPU.
# Needs .gpu4/corpus.npz (train_default --export-corpus of the shipped tokenizer) carried.
source /root/mlxgpu/env.sh
rm -rf /root/t42 && cp -r . /root/t42 && cd /root/t42
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
common="--corpus .gpu4/corpus.npz --generated /root/gen.npy --sequences 32768 --gen-batch 1024 \
  --mtp-steps 4000 --mtp-batch 32 --mtp-lr 1e-3 --weight-decay 0.1"
for v in A:0.75 B:1.0; do
  name=${v%%:*}; share=${v##*:}
  rm -rf /root/sd$name && cp -r workers/default_model /root/sd$name
  timeout 270 python3 -m train.self_distill --out /root/sd$name $common --share $share 2>&1 \
    | grep -v Warning | awk 'NR % 20 == 1 || /generated|written|Error|error/' | cut -c1-400
  cp /root/sd$name/target/mtp.safetensors $OUT/mtp_$name.safetensors
  cp /root/sd$name/train_summary.json $OUT/train_summary_$name.json
done
