"""Stop 60: does the MTP head's compiled step (workers/compiled_step.py) trace again during
served traffic, after warm passes? Each new key (batch size, window width, span, storage
shape) is a new `mx.compile` trace. MLX CUDA compiles the head's steps; here they are forced
on the CPU (SPECFLEET_COMPILE_DRAFT=1, and the per-row route with SPECFLEET_ROW_LINEAR=1, as
on MLX CUDA), so the count, not the time, is what carries over.

    SPECFLEET_COMPILE_DRAFT=1 SPECFLEET_ROW_LINEAR=1 \\
        python bench/results/s60/cpu/head_traces_cpu.py MODEL_DIR [PASSES]

The trained hybrid (stop 57's), B = 8, served traffic (96 tokens +- 50%, 32 held-out
prompts), adaptive depth up to 4, as bench.p5_pairs runs it. Prints, per pass, the steps, the
traces made and at which steps, and the keys of the last traces.
"""

import sys
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine, compiled_step

model_dir = Path(sys.argv[1])
passes = int(sys.argv[2]) if len(sys.argv) > 2 else 3
prompts = heldout_prompts(model_dir, 32)
sp = spread_params(len(prompts), 96, 0.5)
engine = Engine.load(
    model_dir, drafter="mtp", max_batch_size=8, draft_depth=4, adaptive_depth=True, warm_up=True
)
assert engine.drafter is not None and getattr(engine.drafter, "compiled", None) is not None, (
    "the head's steps are not compiled: set SPECFLEET_COMPILE_DRAFT=1"
)
print("traces after load and warm-up:", len(compiled_step._TRACES))
real_compile, made = mx.compile, [0]


def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    made[0] += 1
    return real_compile(fn, *args, **kwargs)


compiled_step.mx.compile = counting  # the module's own reference: only its traces count
for p in range(passes):
    for i, (tokens, params) in enumerate(zip(prompts, sp)):
        engine.add_request(f"p{p}r{i}", tokens, params)
    steps, at, total = 0, [], made[0]
    while engine.has_work():
        before = made[0]
        engine.step()
        steps += 1
        stats = engine.take_round_stats()
        if made[0] > before:
            at.append((steps, made[0] - before, any(s.num_prefill_tokens for s in stats)))
    keys = [(k[1], k[2], k[5][0], k[7][0][0]) for k in list(compiled_step._TRACES)[-6:]]
    print(f"pass {p}: {steps} steps, {made[0] - total} traces; (step, traces, a join step):", at)
    print("  last keys (width, span needed, rows of storage, rows):", keys)
