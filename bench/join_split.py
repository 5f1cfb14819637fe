"""Where an MTP engine's joins go on served traffic: host seconds of each join part, and the
compiled head steps' traces.

    python -m bench.join_split --model-dir DIR [--batch-sizes 16] [--prompts 64] [--spread 0.5]
        --out F.json

Per batch size, a plain engine and an adaptive MTP engine as a worker builds them (warm-up),
and with `--fixed` an MTP engine at fixed depth 3 (no policy: no warm-up), each run twice over
the same served traffic (`bench/p5_pairs.py`'s: held-out prompts, 96 tokens +- `--spread`,
greedy, `ignore_eos`); the second pass is reported. Per pass: wall seconds, the
engine steps with a prefill in them and the rest (`bench/step_log.py`), and for MTP the host
seconds of `prompt_hidden` and the head's `add_rows` at each join, and of the compiled head
steps (`workers/compiled_step.py`: calls, the calls that traced a new key, their seconds).
Host seconds, not device seconds: what a join makes the host do before the next round can
launch. `--sync-joins` evaluates the head's cache after each `add_rows` so that the device's
part of a join (kernels built for its shapes included) lands in that host time too (which
changes how the join's work is launched: those runs' step times are not the engine's own).
The wrappers stay for the process: this is a tool of its own process, not a library.
`SPECFLEET_COMPILE_DRAFT=0` in the environment runs the head as ops instead.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

import workers.membership as membership
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import log_steps
from workers import Engine
from workers import compiled_step as compiled_module

ENGINES = ("plain", "mtp", "mtp_fixed")


def make_engine(name: str, model_dir: Path, B: int) -> Engine:
    """`ENGINES`: plain or adaptive MTP as a worker builds them (warm-up), or MTP at fixed
    depth 3 (no policy: no warm-up)."""
    if name == "plain":
        return Engine.load(model_dir, max_batch_size=B, warm_up=True)
    if name == "mtp":
        return Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=3,
                           adaptive_depth=True, warm_up=True)  # fmt: skip
    if name == "mtp_fixed":
        return Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=3)
    raise SystemExit(f"engine {name!r}: use one of {ENGINES}")


def add_job_args(ap: argparse.ArgumentParser, engines: str, spread: float) -> None:
    """The job the tools that profile one (bench.step_kernels, bench.join_host_profile) run:
    the model, the batch size, the traffic (`bench.p5_pairs`'s) and the engines."""
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--spread", type=float, default=spread)
    ap.add_argument("--engines", default=engines, help=f"comma-separated, of {ENGINES}")
    ap.add_argument("--out", type=Path, required=True)


def job(args: argparse.Namespace) -> tuple[list, list]:
    """The prompts and sampling parameters of `add_job_args`' job: 96 tokens +- spread."""
    prompts = heldout_prompts(args.model_dir, args.prompts)
    return prompts, spread_params(len(prompts), 96, args.spread)


class HostTimer:
    """Seconds and calls of wrapped functions, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t0)

        return timed

    def report(self) -> dict[str, list[float]]:
        return {k: [self.calls[k], round(self.seconds[k], 4)] for k in sorted(self.seconds)}


def timed_compiled(timer: HostTimer, step: Any) -> Callable[..., Any]:
    """The compiled head step, its calls split by whether they traced a new key."""

    def call(*args: Any) -> Any:
        before = len(compiled_module._TRACES)
        t0 = time.perf_counter()
        out = step(*args)
        name = "compiled_traced" if len(compiled_module._TRACES) != before else "compiled_cached"
        timer.add(name, time.perf_counter() - t0)
        return out

    return call


def synced(head: Any) -> Callable[..., None]:
    """The head's `add_rows`, then its cache evaluated."""
    add_rows = head.add_rows

    def run(*args: Any) -> None:
        add_rows(*args)
        mx.eval(head.cache.state_arrays())

    return run


def _time_joins(engine: Engine, timer: HostTimer, sync: bool) -> None:
    """Wrap the engine's prefix-cache inserts, and its drafter's add_rows and compiled steps."""
    engine.prefix_cache.insert = timer.wrap("prefix_insert", engine.prefix_cache.insert)  # type: ignore[method-assign]
    head = engine.drafter
    if head is None:
        return
    add_rows = synced(head) if sync else head.add_rows
    head.add_rows = timer.wrap("add_rows", add_rows)  # type: ignore[method-assign]
    if getattr(head, "compiled", None) is not None:
        head.compiled = timed_compiled(timer, head.compiled)  # type: ignore[attr-defined]


def one_pass(engine: Engine, prompts: list, sp: list, timer: HostTimer) -> dict:
    timer.seconds.clear()
    timer.calls.clear()
    steps = log_steps(engine)
    t0 = time.perf_counter()
    try:
        outs = engine.generate(prompts, sp)
    finally:
        del engine.step  # the class's again
    wall = time.perf_counter() - t0
    joins = [s.seconds for s in steps if s.prefilled]
    return {
        "tokens_per_s": round(sum(len(o.tokens) for o in outs) / wall, 1),
        "wall_s": round(wall, 3),
        "steps": len(steps),
        "prefill_steps": len(joins),
        "prefill_steps_s": round(sum(joins), 3),
        "other_steps_s": round(sum(s.seconds for s in steps) - sum(joins), 3),
        "host": timer.report(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="16")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--sync-joins", action="store_true", help="see the module docstring")
    ap.add_argument("--fixed", action="store_true", help="also MTP at fixed depth 3")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    prompts, sp = job(args)
    timer = HostTimer()
    membership.prompt_hidden = timer.wrap("prompt_hidden", membership.prompt_hidden)  # type: ignore[assignment]
    membership.joining_tail = timer.wrap("joining_tail", membership.joining_tail)  # type: ignore[assignment]
    membership.start_prefill = timer.wrap("start_prefill", membership.start_prefill)  # type: ignore[assignment]
    res: dict = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        names = ["plain", "mtp"] + (["mtp_fixed"] if args.fixed else [])
        engines = {name: make_engine(name, args.model_dir, B) for name in names}
        for engine in engines.values():
            _time_joins(engine, timer, args.sync_joins)
        for rep in range(2):
            for name, engine in engines.items():
                r = one_pass(engine, prompts, sp, timer)
                res[f"B={B} {name} pass{rep}"] = r
                print(f"B={B} {name} pass{rep}: {r}", flush=True)
        if args.fixed:
            res[f"B={B} fixed ratio"] = round(
                res[f"B={B} mtp_fixed pass1"]["tokens_per_s"]
                / res[f"B={B} plain pass1"]["tokens_per_s"],
                3,
            )
        res[f"B={B} ratio"] = round(
            res[f"B={B} mtp pass1"]["tokens_per_s"] / res[f"B={B} plain pass1"]["tokens_per_s"], 3
        )
        res[f"B={B} traces kept"] = len(compiled_module._TRACES)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
