#!/usr/bin/env bash
# s37: the trained hybrid brought back (split under 30 MB), then fixed depth 3 on the same served
# traffic as job_s37a/b (64 prompts of 48-144 tokens), B=8 and 16, this tree
source "$(dirname "$0")/setup.sh"
tar -C /root -cJf /root/q35t.tar.xz q35t && split -b 25000000 /root/q35t.tar.xz $OUT/q35t.tar.xz.part.
for B in 8 16; do
  timeout 150 python3 -m bench.p5_pairs --model-dir $T --prompts 64 --spread 0.5 --pairs 3 --batch-sizes $B --label depth3 --out $OUT/served_depth3_b$B.json 2>&1 | grep -v Warning | tail -1 | cut -c1-400
done
