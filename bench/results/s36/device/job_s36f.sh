#!/usr/bin/env bash
# s36: P1/P2 at B=8 and 32 (random Qwen3 6.6B, bf16): 234756a (before s35's settle change) and this tree, in turns
source "$(dirname "$0")/setup.sh"
for i in 1 2; do
  for side in before after; do
    d=/root/t35; [ $side = before ] && d=/root/before
    (cd $d && timeout 100 python3 -m bench.gpu --presets 6b --batch-sizes 8,32 --repeats 3 --skip-default --out $OUT/gpu_6b_${side}_$i.json 2>&1 | grep -v Warning | grep "^6b" | python3 -c "
import sys, json
for line in sys.stdin:
    b, d = line.split(' ', 2)[1], json.loads(line.split(' ', 2)[2])
    print('$side$i', b, 'plain', round(d['engine_plain_tokens_per_s']), 'BG', round(d['mlx_lm_batch_generator_tokens_per_s']), 'forced', round(d['engine_forced_accept_tokens_per_s']), 'p/BG', round(d['plain_over_batch_generator'], 3), 'eff', round(d['efficiency'], 3))
")
  done
done
