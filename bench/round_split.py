"""Where a pipelined round's host time goes, without a profiler's overhead.

    python -m bench.round_split --model-dir DIR --batch-size 8 --drafter mtp|none [--parts]

A small model's rounds on a GPU are bound by the host (the device finishes each round before
the next is launched). Launched on the engine thread a round's wall time is the sum of the
host's phases; on a GPU rounds launch from workers/launch.py's thread, whose `async_eval` time
overlaps the engine thread's phases (and is charged to whichever scope the engine thread is in
then). This wraps the engine's phases with timers (perf_counter, a few microseconds each;
cProfile inflated Python time ~2x) and prints milliseconds per round. `--parts` dispatches each part of the round as
soon as it is built (the draft, the verify forward, the accept, the cache commit), so the time
MLX spends encoding and launching each part's kernels shows apart (`dispatch:` rows); the
round itself is then a little dearer, and launched on the engine thread (a GPU launches rounds
from workers/launch.py's thread otherwise).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

import workers.engine as engine_module
import workers.membership as membership_module
import workers.pipeline as pipeline_module
import workers.pipelined_rounds as rounds_module
import workers.prefill_job as prefill_job
from bench.peers import add_workload_args, heldout_prompts
from bench.step_log import Step, log_steps
from workers import Engine, SamplingParams, launch


class Split:
    """Timers patched over the engine's phases and MLX's evaluations, process-wide (modules'
    functions, mx.async_eval): `restore` puts the originals back, or every later engine in the
    process keeps them (a test suite's later tests evaluated inside rounds they build)."""

    def __init__(self) -> None:
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.scope = ""  # set while a scoped phase runs: nested phases are also timed apart
        self._patched: list[tuple[Any, str, Any, bool]] = []  # (owner, name, real, own attr)

    def _patch(self, owner: Any, name: str, wrapper: Any) -> None:
        self._patched.append((owner, name, getattr(owner, name), name in vars(owner)))
        setattr(owner, name, wrapper)

    def restore(self) -> None:
        """Undo every patch, newest first (a name patched twice gets its first original)."""
        while self._patched:
            owner, name, real, own = self._patched.pop()
            if own:
                setattr(owner, name, real)
            else:  # an instance that read a class attribute: drop the instance's wrapper
                delattr(owner, name)

    def wrap(
        self,
        owner: Any,
        name: str,
        key: str | None = None,
        scope: bool = False,
        by_scope: bool = False,
    ) -> None:
        """Time owner.name as `key`; `scope`: phases inside it see its name; `by_scope`: also
        time the calls made inside each scope apart."""
        real = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer = self.scope
            if scope:
                self.scope = key or name
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                self.scope = outer
                self.seconds[key or name] += dt
                if outer and by_scope:
                    self.seconds[f"{key or name} (in {outer})"] += dt

        self._patch(owner, name, timed)

    def dispatch_after(self, owner: Any, name: str, arrays: Callable[[Any], list]) -> None:
        """After owner.name returns, launch the arrays it built (timed as `dispatch:name`)."""
        real, launch = getattr(owner, name), mx.async_eval

        def launched(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            t0 = time.perf_counter()
            launch(*arrays(out))
            self.seconds[f"dispatch:{name}"] += time.perf_counter() - t0
            return out

        self._patch(owner, name, launched)


def instrument(engine: Engine, parts: bool) -> Split:
    split = Split()
    for name in ("_launch", "_collect", "_draft", "_forward", "_drop_finished", "_admit"):
        split.wrap(engine, name, scope=name == "_admit")
    split.wrap(rounds_module, "greedy_outcome")
    split.wrap(rounds_module, "emit_round")  # pipelined rounds; the synchronous round's:
    split.wrap(engine_module, "emit_round")
    split.wrap(engine.cache, "commit_lazy", "cache.commit_lazy")
    if engine.drafter is not None:
        split.wrap(engine.drafter, "commit", "drafter.commit")
    # A join's parts (inside _admit)
    split.wrap(membership_module, "start_prefill", "admit: start_prefill")
    split.wrap(membership_module, "prompt_hidden", "admit: prompt_hidden")
    split.wrap(prefill_class(), "advance", "admit: Prefill.advance")
    split.wrap(prefill_job, "prefill_chunk", "admit: prefill_chunk")
    split.wrap(engine.prefix_cache, "insert", "admit: prefix_cache.insert")
    split.wrap(engine.cache, "append", "admit: cache.append")
    if engine.drafter is not None:
        split.wrap(engine.drafter, "add_rows", "admit: drafter.add_rows")
    split.wrap(mx, "async_eval", "async_eval (MLX encoding and launching)", by_scope=True)
    split.wrap(mx, "eval", "eval (waits)", by_scope=True)
    split.wrap(pipeline_module.Flight, "read_back", "Flight.read_back (waiting for the device)")
    if parts:
        split.dispatch_after(
            engine, "_draft", lambda p: [p.device_tokens()] if p.tokens.shape[1] else []
        )
        split.dispatch_after(engine, "_forward", lambda logits: [logits])
        split.dispatch_after(rounds_module, "greedy_outcome", list)
        split.dispatch_after(engine.cache, "commit_lazy", lambda _: engine.cache.state_arrays())
    return split


def step_summary(steps: list[Step]) -> dict[str, float | int]:
    """Steps in which a joining prefill advanced against the others: count, median and total
    milliseconds of each (what a step with a join costs against one without)."""
    out: dict[str, float | int] = {}
    for name, joined in (("with_prefill", True), ("without", False)):
        ts = sorted(x.seconds for x in steps if x.prefilled == joined)
        out[f"{name}_n"] = len(ts)
        if ts:
            out[f"{name}_median_ms"] = round(1e3 * ts[len(ts) // 2], 3)
            out[f"{name}_total_ms"] = round(1e3 * sum(ts), 1)
    return out


def prefill_class() -> type:
    """workers.prefill_job.Prefill, also while force_prefill_cut has wrapped it."""
    return getattr(prefill_job.Prefill, "real", prefill_job.Prefill)


def force_prefill_cut(cut: bool) -> None:
    """Every Prefill the engine starts from now on cuts (or not) at the head's window."""
    real = prefill_class()

    def forced(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "cut_at_window": cut})

    forced.real = real  # type: ignore[attr-defined]
    prefill_job.Prefill = forced  # type: ignore[assignment, misc]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, max_tokens=96)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--drafter", choices=["mtp", "none"], default="mtp")
    ap.add_argument("--parts", action="store_true")
    ap.add_argument(
        "--prefill-cut",
        choices=["auto", "on", "off"],
        default="auto",
        help="force a join's prefill to stop where the head's window starts (on) or "
        "to run whole (off); auto: the backend's choice",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.prefill_cut != "auto":
        force_prefill_cut(args.prefill_cut == "on")
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = [SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, temperature=0.0)] * len(
        prompts
    )
    drafter = "mtp" if args.drafter == "mtp" else None
    if args.parts:
        # A part's dispatch evaluates on the engine thread, which must not run beside a launch
        # on the launcher thread (workers/launch.py; at B = 16 on the H200 it failed MLX's graph
        # capture, bench/results/s55/README.md): this engine has no launcher thread.
        os.environ[launch.ENV] = "0"
    engine = Engine.load(
        args.model_dir, drafter=drafter, max_batch_size=args.batch_size, draft_depth=args.depth
    )
    engine.generate(prompts, sp)  # warm: kernels and graphs of every shape
    engine.take_round_stats()
    split = instrument(engine, args.parts)
    steps = log_steps(engine)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    seconds = time.perf_counter() - t0
    sizes = [s.batch_size for s in engine.take_round_stats() if s.batch_size]
    rounds = len(sizes)
    tokens = sum(len(o.tokens) for o in outs)
    result = {
        "drafter": args.drafter, "batch_size": args.batch_size, "prefill_cut": args.prefill_cut, "device": str(mx.default_device()),
        "tokens_per_s": tokens / seconds, "rounds": rounds, "ms_per_round": 1e3 * seconds / rounds,
        "rows_per_round": sum(sizes) / rounds, "rounds_below_full": sum(n < args.batch_size for n in sizes),
        "steps": step_summary(steps),
        "ms_per_round_by_phase": {k: round(1e3 * v / rounds, 3) for k, v in
                                  sorted(split.seconds.items(), key=lambda kv: -kv[1])},
    }  # fmt: skip
    print(f"{args.drafter} B={args.batch_size}: {result['tokens_per_s']:.0f} tokens/s, "
          f"{rounds} rounds ({result['rounds_below_full']} below B), {result['rows_per_round']:.2f} rows "
          f"a round, {result['ms_per_round']:.2f} ms a round")  # fmt: skip
    for k, v in result["steps"].items():
        print(f"   steps {k:39s} {v}")
    for k, v in result["ms_per_round_by_phase"].items():
        print(f"   {k:45s} {v:6.3f} ms")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
