"""Engine warm-up: what each draft depth costs at each batch size, measured before serving.

The depth policy (workers/depth_policy.py) learns per batch-size bucket what a round of each
depth costs. Learnt on live traffic, that costs the first requests: every bucket's first rounds
probe depths that may not pay, and rows joining a bucket not yet probed get what the drafter
needs in case it drafts (an MTP head's prompt window: the target's last layer over it, +8% of
the prefill on the 2-core CPU). Measured there, 2 workers of 32 held-out prompts each at B=16,
where drafting never pays: MTP took 6-8% longer than no drafter, and ~0-2% once both were
known in advance.

An engine without a policy (no drafter, one that can never pay, or a fixed depth) has nothing
to measure, but MLX builds each compiled kernel (fused elementwise ops: SwiGLU, the softmax's
exponentials) the first time a shape class meets it: a g++ build per kernel on the CPU
(workers/cpu_jit.py), a shader compile on Metal. On a fresh machine the demo's no-drafter batch
job paid two such builds inside its timed run (one worker's 32 held-out prompts on the 2-core
CPU: 7.73 s against 5.79 s warm), and its batch line read the MTP run 1.37x as fast where runs
on a warm cache read 0.73-1.02x (bench/results/s49/). So it too runs KERNEL_ROUNDS rounds at
each bucket's batch size first (plain ones, or at its fixed depth): +0.95 s at startup on the
CPU once the kernels are built (default model, 16 rows).

So a serving worker measures first, on synthetic prompts: for each power-of-two batch size up
to max_batch_size, that many rows prefill and run a few rounds at every depth the policy may
choose. The policy keeps those rounds' costs and forgets their acceptance (synthetic text says
nothing about real prompts; acceptance restarts from its prior and is learnt from the rounds
that draft). On MLX CUDA the same rounds build the graphs of those shapes before traffic does,
also for an engine without a drafter: a fresh plain engine's first job (H200, default model, 64
prompts at B=32) ran 0.93-1.94x as fast warmed up, median 1.30x (bench/cold_batch.py).
Costs ~3 s on the CPU with the default model (a startup cost, like loading the weights).

On MLX CUDA a warm-up does not teach the policy. There a short job's time is mostly the graph
builds of the batch sizes a draining batch passes through, and drafting spreads the rows'
finishing rounds apart, so the batch passes through more of them; per-round costs do not show
that. Measured on an H200 (default model, 64 prompts at B=32, fresh engines): taught by the
warm-up, the policy drafted at depth 3 throughout, 0.31-0.54x of a warmed plain engine. So
there the warm-up only builds (`build_shapes`): every batch size from max_batch_size down to 1,
at each depth the policy may choose, and the policy keeps only which shapes are built; then
one prefill at each chunk width beyond the first (`prefill_widths`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workers.backend import Backend
from workers.types import SamplingParams

if TYPE_CHECKING:
    from workers.engine import Engine

PROMPT_TOKENS = 64  # the held-out prompts' median is ~110; attention is a small share here
ROUNDS = 5  # per depth and size; a shape's first round pays one-offs and the policy drops it
# Rounds a size for an engine without a policy, after the step that prefills its rows (which
# decodes a round too): those are launched pipelined, behind the round before them.
KERNEL_ROUNDS = 2
# Prefill widths the CUDA warm-up builds at most (`prefill_widths`): each is a kernel build
# (~1.3 s on an H200), so a prefill_step_size of 32k would otherwise add 255 of them to startup;
# 16 spans (2,048 tokens at span 128) cover prompts up to that length.
WIDTHS_MAX = 16


def batch_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, ... up to and including max_batch_size: one per policy bucket."""
    sizes = [1 << i for i in range(max_batch_size.bit_length()) if 1 << i < max_batch_size]
    return sizes + [max_batch_size]


def warm_up(engine: Engine, seed: int = 0) -> list[int]:
    """Run a few rounds at every bucket's batch size; returns the sizes run. With a depth
    policy (on the CPU, Metal) every depth it may choose, timed for it. Without one (no
    drafter, one that can never pay, or a fixed depth): on MLX CUDA every shape's graph
    (`build_shapes`), elsewhere KERNEL_ROUNDS rounds a size, so that MLX builds its compiled
    kernels (module docstring) before the first requests would."""
    if Backend.current().builds_per_shape:
        return build_shapes(engine, seed)
    policy = engine.depth_policy
    teach = policy if policy is not None and not policy.hopeless else None
    rng = np.random.default_rng(seed)
    if teach is None:
        order = [0] * KERNEL_ROUNDS
    elif engine._device_drafter:  # MTP head, or none
        # Depths interleaved, so that the machine's load drifting hits each alike.
        order = [0] + [k for _ in range(ROUNDS) for k in teach.depths()]
    else:  # a host-side drafter's rounds cannot pipeline behind a plain one: in blocks, or
        # each drafting round would absorb the plain round before it (and plain be unmeasured)
        order = [k for k in teach.depths() for _ in range(ROUNDS + 1)]
    deepest = engine.config.draft_depth if engine.drafter is not None else 0  # (no policy: all)
    params = SamplingParams(max_tokens=(len(order) + 2) * (deepest + 1) + 8, ignore_eos=True)
    prompt_len = min(PROMPT_TOKENS, engine.max_context - params.max_tokens - 1)
    per_row = engine.row_factory.reserve(prompt_len, params)
    if prompt_len < 1 or per_row > engine.kv_budget:
        return []
    measured = []
    for size in batch_sizes(engine.config.max_batch_size):
        if size * per_row > engine.kv_budget:  # these rows would not all run at once
            break
        ids = [f"warm-up-{size}-{i}" for i in range(size)]
        for rid in ids:
            engine.add_request(rid, rng.integers(1, engine.vocab_size, prompt_len).tolist(), params)
        while engine.has_work() and len(engine.rows) < size:  # prefill, then all rows run
            engine.step()
        if len(engine.rows) == size:
            for k in order:
                if teach is not None:
                    teach.forced = k
                engine.step()
            measured.append(size)
        if teach is not None:
            teach.forced = 0
        for rid in ids:
            engine.abort(rid)
        while engine.has_work():
            engine.step()
    if teach is not None:
        teach.end_warm_up(measured)
    engine.prefix_cache.clear()
    engine.take_round_stats()  # not traffic: kept out of the worker's metrics
    return measured


def build_shapes(engine: Engine, seed: int = 0) -> list[int]:
    """MLX CUDA: build the round graphs of every batch size a draining batch passes through
    (max_batch_size rows, then one fewer at a time down to 1), at every depth the policy may
    choose, before traffic does; returns the sizes run. Nothing is taught but what was built:
    the policy forgets these rounds' costs and learns them on traffic (module docstring).

    Each new (batch size, depth) shape is a build there: 50-180 ms a drafting shape with the
    trained hybrid on an H200, against 4-8 ms rounds, and a 16-prompt job at B=8 met 3-6 of
    them in every pass (the draining batch's sizes vary with each row's acceptance)."""
    policy = engine.depth_policy
    depths: list[int | None] = [None]  # no policy: whatever depth the engine drafts
    if policy is not None and not policy.hopeless:
        depths = list(policy.depths())
    deepest = engine.config.draft_depth if engine.drafter is not None else 0
    size = engine.config.max_batch_size
    rounds = (len(depths) + 1) * size + 4  # a row's rounds at most: each size's, and the aborts'
    params = SamplingParams(max_tokens=rounds * (deepest + 1), ignore_eos=True)
    prompt_len = min(PROMPT_TOKENS, engine.max_context - params.max_tokens - 1)
    if prompt_len < 1:
        return []
    per_row = engine.row_factory.reserve(prompt_len, params)
    size = min(size, engine.kv_budget // per_row)  # rows that run at once
    rng = np.random.default_rng(seed)
    ids = [f"warm-up-{i}" for i in range(size)]
    for rid in ids:
        engine.add_request(rid, rng.integers(1, engine.vocab_size, prompt_len).tolist(), params)
    while engine.has_work() and len(engine.rows) < size:  # prefill, then all rows run
        engine.step()
    built = []
    while ids and len(engine.rows) == len(ids):
        for k in depths:
            if policy is not None:
                policy.forced = k
            engine.step()
        built.append(len(ids))
        engine.abort(ids.pop())
        engine.step()  # the aborted row leaves before this round computes
    for rid in ids:
        engine.abort(rid)
    while engine.has_work():
        engine.step()
    prefill_widths(engine, rng)
    if policy is not None:
        policy.forget_rounds()
    engine.prefix_cache.clear()
    engine.take_round_stats()  # not traffic: kept out of the worker's metrics
    return built


def prefill_widths(engine: Engine, rng: np.random.Generator) -> list[int]:
    """MLX CUDA: prefill one synthetic row at each chunk width traffic can make beyond the
    rounds' prompts (which pad to one span), up to `prefill_step_size`; returns the widths run.

    A prefill chunk pads to a multiple of the attention span (workers/forward.py
    `prefill_chunk`), and the recurrent layers' kernel is built per window length
    (workers/gdn_recurrence.py: a template constant), so each width a process first meets
    compiles it. Held-out prompts of 72-198 tokens pad to 256, which the 64-token warm-up rows
    never reached: a warmed engine's first batched prefill then took 2.2-2.7 s against ~30 ms
    once built (H200, trained hybrid, B = 8 and 16, bench/results/s61/). Batch size is not
    one of the kernel's constants, so one row builds what a batched prefill of that width
    needs. At most WIDTHS_MAX widths past the first."""
    span, step = engine.cache.span, engine.config.prefill_step_size
    if span <= 1:  # widths are exact (CPU, Metal): nothing is built per width
        return []
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    widths = []
    widest = min(-(-step // span), WIDTHS_MAX + 1) * span
    for width in range(2 * span, widest + 1, span):
        # The row prefills its history but the last token: width - span + 1 tokens pad to width.
        prompt_len = width - span + 2
        if prompt_len + 1 > engine.max_context:
            break
        if engine.row_factory.reserve(prompt_len, params) > engine.kv_budget:
            break
        prompt = rng.integers(1, engine.vocab_size, prompt_len).tolist()
        engine.add_request(f"warm-up-width-{width}", prompt, params)
        while engine.has_work():
            engine.step()
        widths.append(width)
    return widths
