"""Where a job's time goes, step by step: a plain engine and an MTP engine, each step's wall
time, batch size, prefill, and the round its depth policy observed (batch size, depth, cost).

    python -m bench.step_timeline --model-dir DIR [--batch-size 8] [--repeats 3]
        [--depth 3] [--forced-depth K] [--out FILE]

The MTP engine runs as a serving worker builds it (adaptive depth, warm-up), or held at one
depth with --forced-depth (the policy still observes every round, so its cost per round can be
set beside the job's whole time). Both decode the held-out prompts greedily, taking turns. A
depth policy's choices are judged by whole jobs (bench/p5_pairs.py); this shows why a job
took what it took: rounds at each (batch size, depth), prefill steps, one-off spikes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.peers import add_workload_args, heldout_prompts
from bench.step_log import log_steps
from workers import Engine, SamplingParams


def timed_steps(engine: Engine, prompts: list[list[int]], sp: SamplingParams) -> dict:
    """One job; per step [wall ms, rows after, prefill ms, prefill tokens, observed round]."""
    observed: dict[int, tuple[int, int, float]] = {}  # step index: (rows, depth, ms)
    policy = engine.depth_policy
    real_observe = policy.observe if policy else None

    def observe(counts: np.ndarray, accepted: np.ndarray, seconds: float) -> None:
        # called inside engine.step, before the step is logged: its index is len(steps)
        seen = (len(counts), int(np.max(counts, initial=0)), round(seconds * 1e3, 3))
        observed.setdefault(len(steps), seen)
        assert real_observe is not None
        real_observe(counts, accepted, seconds)

    steps = log_steps(engine)
    if policy is not None:
        policy.observe = observe  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        outs = engine.generate(prompts, [sp] * len(prompts))
        wall = time.perf_counter() - t0
    finally:
        del engine.step
        if policy is not None:
            del policy.observe
    tokens = sum(len(o.tokens) for o in outs)
    rows = [[round(x.seconds * 1e3, 3), x.rows, round(x.prefill_s * 1e3, 3), x.prefill_tokens,
             list(observed[i]) if i in observed else None] for i, x in enumerate(steps)]  # fmt: skip
    return {"wall_ms": wall * 1e3, "tokens_per_s": tokens / wall, "steps": rows}


def by_shape(steps: list[list]) -> dict[str, list[float]]:
    """{"B,k": [rounds, ms]} over observed rounds, "prefill": [steps, ms] (whole step walls)."""
    out: dict[str, list[float]] = {}
    for wall, _, prefill_ms, _, seen in steps:
        for key in ([f"{seen[0]},{seen[1]}"] if seen else []) + (["prefill"] if prefill_ms else []):
            cell = out.setdefault(key, [0, 0.0])
            cell[0] += 1
            cell[1] = round(cell[1] + wall, 2)
    return dict(sorted(out.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, max_tokens=96)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--forced-depth", type=int, help="hold the MTP engine at this depth")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, temperature=0.0)
    B = args.batch_size
    plain = Engine.load(args.model_dir, max_batch_size=B, warm_up=True)
    mtp = Engine.load(
        args.model_dir, drafter="mtp", max_batch_size=B, draft_depth=args.depth,
        adaptive_depth=True, warm_up=args.forced_depth is None,
    )  # fmt: skip
    if args.forced_depth is not None and mtp.depth_policy is not None:
        mtp.depth_policy.forced = args.forced_depth
    engines = {"plain": plain, "mtp": mtp}
    for engine in engines.values():  # warm: the job's own shapes built once
        engine.generate(prompts, [sp] * len(prompts))
    runs: dict[str, dict] = {}
    for rep in range(args.repeats):
        for name, engine in engines.items():
            run = runs[f"{name} {rep}"] = timed_steps(engine, prompts, sp)
            print(f"{name} {rep}: {run['tokens_per_s']:.1f} tokens/s, {len(run['steps'])} "
                  f"steps, {json.dumps(by_shape(run['steps']))}", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({
            "model_dir": str(args.model_dir), "device": str(mx.default_device()),
            "batch_size": B, "forced_depth": args.forced_depth, "prompts": args.prompts,
            "max_tokens": args.max_tokens, "runs": runs,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
