"""s57: what a join costs on MLX CUDA, by part: the launcher thread's encode (mx.async_eval) of
the rounds and of the joiners' prefill chunks queued behind them, the engine thread's _admit,
and (a second engine, launching on its own thread) the primitives a prefill chunk and a round
encode. MTP at fixed depth 3, served traffic (96 tokens +- 50%).

    python bench/results/s57/device/join_split_gpu.py MODEL_DIR B PROMPTS OUT.json
"""

import collections
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import mlx.core as mx

import workers.prefill_job as prefill_job
from bench.graph_ops import primitives
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine, launch, membership

model_dir, B, n_prompts, out = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
prompts = heldout_prompts(model_dir, n_prompts)
sp = spread_params(len(prompts), 96, 0.5)


def timed_run() -> dict:
    engine = Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=3)
    engine.generate(prompts, sp)  # warm
    tags: collections.deque[str] = collections.deque()
    encode = collections.defaultdict(list)  # tag -> seconds in the launcher's async_eval
    real_eval = mx.async_eval
    real_launch, real_behind = launch.Launcher.launch, launch.Launcher.queue_behind

    def tagged_launch(self, arrays):
        tags.append("round")
        return real_launch(self, arrays)

    def tagged_behind(self, arrays):
        tags.append("prefill" if in_prefill[0] else "other_behind")
        return real_behind(self, arrays)

    in_prefill = [False]

    def timed_eval(*args):
        t0 = time.perf_counter()
        out = real_eval(*args)
        if threading.current_thread().name == "specfleet-launcher":
            encode[tags.popleft() if tags else "untagged"].append(time.perf_counter() - t0)
        return out

    real_chunk = prefill_job.prefill_chunk

    def chunk(*a, **k):
        in_prefill[0] = True
        try:
            return real_chunk(*a, **k)
        finally:
            in_prefill[0] = False

    admit_s, step_s = [], []
    real_admit, real_step = membership.Membership._admit, Engine._step

    def admit(self, stats):
        t0 = time.perf_counter()
        real_admit(self, stats)
        if stats.time_prefill_s:
            admit_s.append(time.perf_counter() - t0)

    def step(self):
        t0 = time.perf_counter()
        events = real_step(self)
        st = self._stats[-1] if self._stats else None
        step_s.append((time.perf_counter() - t0, bool(st and st.num_prefill_tokens)))
        return events

    launch.Launcher.launch, launch.Launcher.queue_behind = tagged_launch, tagged_behind
    mx.async_eval, prefill_job.prefill_chunk = timed_eval, chunk
    membership.Membership._admit, Engine._step = admit, step
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    wall = time.perf_counter() - t0
    launch.Launcher.launch, launch.Launcher.queue_behind = real_launch, real_behind
    mx.async_eval, prefill_job.prefill_chunk = real_eval, real_chunk
    membership.Membership._admit, Engine._step = real_admit, real_step
    ms = lambda xs: round(1e3 * statistics.median(xs), 3) if xs else None  # noqa: E731
    return {
        "tokens_per_s": round(sum(len(o.tokens) for o in outs) / wall, 1),
        "encode_ms_median": {k: ms(v) for k, v in encode.items()},
        "encode_count": {k: len(v) for k, v in encode.items()},
        "admit_ms_median_with_prefill": ms(admit_s),
        "step_ms_median": {
            "join": ms([s for s, j in step_s if j]),
            "no_join": ms([s for s, j in step_s if not j]),
        },
        "steps": {"join": sum(j for _, j in step_s), "all": len(step_s)},
    }


def counted_run() -> dict:
    os.environ[launch.ENV] = "0"  # evaluations on this thread, where a flag can tell them apart
    engine = Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=3)
    engine.generate(prompts, sp)
    where = ["round"]
    counts = collections.defaultdict(collections.Counter)
    real = {n: getattr(mx, n) for n in ("eval", "async_eval")}

    def wrap(name):
        def f(*args):
            flat = [
                a
                for arg in args
                for a in (arg if isinstance(arg, list | tuple) else [arg])
                if isinstance(a, mx.array)
            ]
            counts[where[0]].update(primitives(flat))
            return real[name](*args)

        return f

    real_chunk = prefill_job.prefill_chunk

    def chunk(*a, **k):
        where[0] = "prefill"
        try:
            return real_chunk(*a, **k)
        finally:
            where[0] = "round"

    per_step = []
    real_step = Engine._step

    def step(self):
        for c in counts.values():
            c.clear()
        events = real_step(self)
        per_step.append({k: dict(v) for k, v in counts.items()})
        return events

    for n in real:
        setattr(mx, n, wrap(n))
    prefill_job.prefill_chunk, Engine._step = chunk, step
    engine.generate(prompts, sp)
    for n, f in real.items():
        setattr(mx, n, f)
    prefill_job.prefill_chunk, Engine._step = real_chunk, real_step
    pre = [s["prefill"] for s in per_step if s.get("prefill")]
    rounds = [s["round"] for s in per_step if s.get("round")]
    by_name = collections.Counter()
    for p in pre:
        by_name.update(p)
    return {
        "prefill_chunks": len(pre),
        "prefill_primitives_median": statistics.median(sum(p.values()) for p in pre),
        "round_primitives_median": statistics.median(sum(r.values()) for r in rounds),
        "prefill_by_name": {k: round(v / len(pre), 1) for k, v in by_name.most_common(30)},
    }


result = {
    "model_dir": str(model_dir),
    "B": B,
    "prompts": n_prompts,
    "device": str(mx.default_device()),
    "mlx": mx.__version__,
    "timed": timed_run(),
    "counted": counted_run(),
}
print(json.dumps(result, indent=1))
Path(out).write_text(json.dumps(result, indent=1))
