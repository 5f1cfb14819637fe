"""GPU: what the device does in each engine step of a job, join steps apart from the rest.

    python -m bench.step_kernels --model-dir DIR [--batch-size 16] [--prompts 64] [--spread 0]
        [--engines plain,mtp_fixed,mtp] --out F.json

`bench.join_split` times a job's steps on the host; this says what fills them on the device.
Each engine (`bench.join_split.make_engine`) runs the job twice; the second pass runs under
`torch.profiler` (CUPTI records every kernel the process launches, MLX's included; PyTorch is
not a specfleet dependency: the lent GPU machines ship it, as for `bench.kernel_profile`).
Each step and its parts (`_launch`, `_collect`, `_drop_finished`, `_admit`) are marked on the
host's timeline. Per class of step (a prefill started, advanced or ended in it: "join"; the
step after one, which launches the first round with the joiners: "after_join"; else "round"),
it reports the steps' wall milliseconds, the milliseconds the device ran kernels inside them,
the kernels that started on the device inside them (with pipelined rounds a step's launch
mostly runs during the next step), the kernels and CUDA API calls that took the most, and the
host parts' milliseconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.join_split import add_job_args, job, make_engine
from bench.step_log import log_steps
from workers import Engine

PARTS = ("_launch", "_collect", "_drop_finished", "_admit")


def marked(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    from torch.profiler import record_function

    def run(*args: Any, **kwargs: Any) -> Any:
        with record_function(name):
            return fn(*args, **kwargs)

    return run


def busy_us(spans: list[tuple[float, float]]) -> float:
    """Microseconds covered by the union of [start, end) spans."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def per_step(totals: dict[str, float], n: int, scale: float = 1e-3) -> list[tuple[str, float]]:
    """Each name's total per step (microseconds to milliseconds by default), most first."""
    return sorted(((k, round(v / n * scale, 3)) for k, v in totals.items()), key=lambda x: -x[1])


def _within(events: list[dict], starts: list[float], longest: float, t0: float, t1: float):
    """(event, microseconds of it inside [t0, t1)) for the `events` (sorted by start, `starts`
    their starts, none longer than `longest`) that overlap the span."""
    for e in events[bisect_left(starts, t0 - longest) : bisect_left(starts, t1)]:
        inside = min(e["ts"] + e["dur"], t1) - max(e["ts"], t0)
        if inside > 0:
            yield e, inside


def summarise(trace: dict, classes: list[str], top: int) -> dict:
    """Per step class: wall, device-busy, kernel, host-part and API milliseconds per step, from
    a chrome trace whose host 'specfleet_step' marks are in step order (one per entry of
    `classes`). Host marks are the `user_annotation` events (with CUDA activity torch also
    writes a `gpu_user_annotation` copy of each, which is not host time); every span counts
    only its part inside the step."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    host = [e for e in ev if e.get("cat") == "user_annotation"]
    steps = sorted((e for e in host if e["name"] == "specfleet_step"), key=lambda e: e["ts"])
    assert len(steps) == len(classes), (len(steps), len(classes))

    def timeline(events: list[dict]) -> tuple[list[dict], list[float], float]:
        events = sorted(events, key=lambda e: e["ts"])
        return events, [e["ts"] for e in events], max((e["dur"] for e in events), default=0.0)

    kernels = timeline([e for e in ev if e.get("cat") == "kernel"])
    calls = timeline([e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")])
    parts = timeline([e for e in host if e["name"] in PARTS])
    out: dict[str, Any] = {}
    for cls in sorted(set(classes)):
        mine = [s for s, c in zip(steps, classes) if c == cls]
        spans: list[tuple[float, float]] = []
        by_kernel: dict[str, float] = defaultdict(float)
        # kernels that started on the device in the step: with pipelined rounds, a step's
        # launch mostly runs in the next step (so "after_join" steps start few)
        started: dict[str, float] = defaultdict(float)
        by_call: dict[str, float] = defaultdict(float)
        by_part: dict[str, float] = defaultdict(float)
        for s in mine:
            t0, t1 = s["ts"], s["ts"] + s["dur"]
            for k, inside in _within(*kernels, t0, t1):
                start = max(k["ts"], t0)
                spans.append((start, start + inside))
                by_kernel[k["name"][:100]] += inside
                if k["ts"] >= t0:
                    started[k["name"][:100]] += 1
            for c, inside in _within(*calls, t0, t1):
                by_call[c["name"]] += inside
            for p, inside in _within(*parts, t0, t1):
                by_part[p["name"]] += inside
        n = len(mine)
        out[cls] = {
            "steps": n,
            "wall_ms_per_step": round(sum(s["dur"] for s in mine) / n / 1e3, 3),
            "device_busy_ms_per_step": round(busy_us(spans) / n / 1e3, 3),
            "host_parts_ms_per_step": dict(per_step(by_part, n)),
            "kernels_ms_per_step": per_step(by_kernel, n)[:top],
            "kernel_starts_per_step": round(sum(started.values()) / n, 1),
            "starts_per_step_by_kernel": per_step(started, n, scale=1.0)[:top],
            "api_ms_per_step": per_step(by_call, n)[:top],
        }
    return out


def profiled_pass(engine: Engine, prompts: list, sp: list) -> tuple[dict, list[str], float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for name in PARTS:  # instance attributes over the class's methods, removed below
        setattr(engine, name, marked(getattr(engine, name), name))
    steps = log_steps(engine)
    inner = engine.step
    engine.step = marked(inner, "specfleet_step")  # type: ignore[method-assign]
    gpu = torch.cuda.is_available()  # without one (a smoke run on the CPU): host marks only
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    try:
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            engine.generate(prompts, sp)
            wall = time.perf_counter() - t0
    finally:
        for name in ("step", *PARTS):
            delattr(engine, name)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return trace, step_classes([s.prefilled for s in steps]), wall


def step_classes(prefilled: list[bool]) -> list[str]:
    """Each step's class: "join" (a prefill started, advanced or ended in it), "after_join"
    (the step after one, which launches the first round with the joiners in it), "round"."""
    classes = ["join" if p else "round" for p in prefilled]
    for i in range(1, len(classes)):
        if classes[i] == "round" and classes[i - 1] == "join":
            classes[i] = "after_join"
    return classes


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_args(ap, "plain,mtp_fixed,mtp", spread=0.0)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # a CUDA context for CUPTI before the profiled passes
    prompts, sp = job(args)
    B = args.batch_size
    res: dict[str, Any] = {"batch_size": B, "prompts": len(prompts), "spread": args.spread}
    for name in args.engines.split(","):
        engine = make_engine(name, args.model_dir, B)
        t0 = time.perf_counter()
        engine.generate(prompts, sp)  # kernels built, graphs cached
        first = time.perf_counter() - t0
        trace, classes, wall = profiled_pass(engine, prompts, sp)
        res[name] = {"first_pass_s": round(first, 3), "profiled_pass_s": round(wall, 3),
                     **summarise(trace, classes, args.top)}  # fmt: skip
        print(name, json.dumps(res[name], indent=1), flush=True)
        del engine, trace
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
