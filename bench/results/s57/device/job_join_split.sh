#!/usr/bin/env bash
# s57: join_split_gpu.py on the trained hybrid of job_train.sh, brought back from an earlier
# machine in parts (the carry's 64 MiB holds the tree and half the checkpoint per run): parts
# aa/ab staged at /root/q35parts by an earlier run, the rest in .gpu4b/.
source bench/results/s57/device/q35t.sh  # (as run: the same steps inline)
for spec in "16 64" "8 32"; do
  set -- $spec
  PYTHONPATH=.:$PYTHONPATH timeout 280 python3 bench/results/s57/device/join_split_gpu.py \
    /root/q35t "$1" "$2" "$OUT/join_split_b$1_h200.json" 2>&1 | grep -v -i warning | \
    python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps(d['timed']), json.dumps({k: v for k, v in d['counted'].items() if k != 'prefill_by_name'}))" || true
done
nvidia-smi --query-gpu=name --format=csv,noheader
