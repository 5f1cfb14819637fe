"""Stop 61: a step's seconds split between the engine thread and the launcher thread, by step
class (join, the two steps after a join, steady), plain against MTP, as served on MLX CUDA.
join_trace_split.py showed MTP's join steps cost ~5 ms over its steady steps where plain's cost
~2.5, and the head's prompt pass is not it (prompt_window 0 saved <= 0.5 ms a join).

    python bench/results/s61/device/join_threads.py MODEL_DIR B PROMPTS REPS OUT.json

Per step: its wall; the engine thread's waits (Ticket.wait and read, Launcher.idle, a launch's
hand-off), so wall - waits is its own Python; and the launcher thread's `mx.async_eval`
seconds for what the step queued (launches, and `evaluate_behind` work: a joiner's prefill
chunk). Engines as bench/adaptive_trace.py builds them; served traffic (96 tokens +- 50%).
"""

import collections
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import log_steps, step_classes
from workers import Engine, launch

model_dir, B, n_prompts, reps, out = (
    Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
)  # fmt: skip
prompts = heldout_prompts(model_dir, n_prompts)
sp = spread_params(len(prompts), 96, 0.5)
engines = {
    "plain": Engine.load(model_dir, max_batch_size=B, warm_up=True),
    "mtp": Engine.load(
        model_dir, drafter="mtp", max_batch_size=B, draft_depth=4, adaptive_depth=True, warm_up=True
    ),  # fmt: skip
}
step_at = [0]  # the engine step now running
tags: collections.deque = collections.deque()  # (step, kind) per enqueue, in queue order
waits: collections.defaultdict = collections.defaultdict(float)  # step -> engine-thread waits
encode: collections.defaultdict = collections.defaultdict(float)  # (step, kind) -> seconds

real_enqueue, real_launch = launch.Launcher._enqueue, launch.Launcher.launch
real_wait, real_idle, real_eval = launch.Ticket.wait, launch.Launcher.idle, mx.async_eval


def enqueue(self, arrays):  # type: ignore[no-untyped-def]
    tags.append((step_at[0], kind_now[0]))
    return real_enqueue(self, arrays)


kind_now = ["behind"]


def launch_(self, arrays):  # type: ignore[no-untyped-def]
    kind_now[0] = "launch"
    try:
        ticket = real_launch(self, arrays)
    finally:
        kind_now[0] = "behind"
    waits[step_at[0]] += ticket.handoff_s
    return ticket


def timed(real):  # type: ignore[no-untyped-def]
    def f(self, *a):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "specfleet-launcher":
            return real(self, *a)
        t0 = time.perf_counter()
        try:
            return real(self, *a)
        finally:
            waits[step_at[0]] += time.perf_counter() - t0

    return f


def async_eval(*arrays):  # type: ignore[no-untyped-def]
    if threading.current_thread().name != "specfleet-launcher":
        return real_eval(*arrays)
    tag = tags.popleft() if tags else (-1, "untagged")
    t0 = time.perf_counter()
    try:
        return real_eval(*arrays)
    finally:
        encode[tag] += time.perf_counter() - t0


launch.Launcher._enqueue, launch.Launcher.launch = enqueue, launch_
launch.Ticket.wait, launch.Launcher.idle = timed(real_wait), timed(real_idle)
mx.async_eval = async_eval


def one_pass(engine: Engine) -> dict:
    steps = log_steps(engine)
    real_step = engine.step
    waits.clear()
    encode.clear()
    tags.clear()

    def step() -> list:
        step_at[0] = len(steps)
        return real_step()

    engine.step = step  # type: ignore[method-assign]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    wall = time.perf_counter() - t0
    del engine.step
    launch.idle()
    kinds = step_classes(steps)
    split = {}
    for kind in ("join", "after_join", "steady"):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        med = lambda xs: round(1e3 * statistics.median(xs), 3) if xs else None  # noqa: E731
        split[kind] = {
            "steps": len(idx),
            "wall": med([steps[i].seconds for i in idx]),
            "engine_waits": med([waits[i] for i in idx]),
            "engine_own": med([steps[i].seconds - waits[i] for i in idx]),
            "encode_launch": med([encode[(i, "launch")] for i in idx]),
            "encode_behind": med([encode[(i, "behind")] for i in idx]),
        }
    return {"tokens_per_s": round(sum(len(o.tokens) for o in outs) / wall, 1),
            "steps": len(steps), "split": split}  # fmt: skip


result: dict = {"B": B, "prompts": n_prompts, "device": str(mx.default_device()), "reps": []}
for rep in range(reps):
    order = ("plain", "mtp") if rep % 2 == 0 else ("mtp", "plain")
    r = {name: one_pass(engines[name]) for name in order}
    result["reps"].append(r)
    for n in order:
        print(f"B={B} rep{rep} {n} {r[n]['tokens_per_s']} tok/s, {r[n]['steps']} steps:")
        for kind, v in r[n]["split"].items():
            print(f"   {kind:10s} {json.dumps(v)}", flush=True)
    out.write_text(json.dumps(result, indent=1))
