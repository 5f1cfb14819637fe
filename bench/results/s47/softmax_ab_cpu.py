"""Stop 47: the CPU attention's split softmax (workers/cpu_ops.py `softmax`) against MLX's.

    PYTHONPATH=. python bench/results/s47/softmax_ab_cpu.py B PROMPTS REPS DEPTH

The held-out prompts (64 new tokens, EOS honoured) in groups of B, decoded in turns in one
process (bench.turns.in_turns), warm, every output checked equal to the first engine's: plain
with MLX's softmax (`cpu_ops.softmax` patched to `mx.softmax(..., precise=True)` while it is
built and runs), plain with the split one, and (DEPTH > 0) a host MTP engine, adaptive up to
DEPTH, with each. Prints the first engine's time over each other's.
"""

import json
import sys

import mlx.core as mx

from bench.turns import host_mtp_engine, in_turns, patched
from workers import cpu_ops
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B, n, reps, depth = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def mlx_softmax(x: mx.array) -> mx.array:
    return mx.softmax(x, axis=-1, precise=True)


def old():  # type: ignore[no-untyped-def]
    return patched(cpu_ops, "softmax", mlx_softmax)


plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
plain_old = Engine(plain.model, plain.tokenizer, max_batch_size=B, warm_up=True)
engines = {"plain_old": plain_old, "plain_new": plain}
ctx = {"plain_old": old, "mtp_old": old}
if depth:
    engines["mtp_old"] = host_mtp_engine(plain, depth, True)
    engines["mtp_new"] = host_mtp_engine(plain, depth, True)
ps = heldout_prompts(n)
groups = [ps[i : i + B] for i in range(0, n, B)]
r = in_turns(engines, groups, SamplingParams(max_tokens=64), reps, ctx)
print(json.dumps({"B": B, "prompts": n, "reps": reps, "depth": depth, **r}))
