"""Operations the device runs per generated token: plain decoding against MTP rounds.

    python -m bench.graph_ops --model-dir DIR [--batch-sizes 1,4,8,16] [--prompts 16]

A small model on a GPU is bound by kernel launches, not by FLOPs or bytes (a 16M-parameter
hybrid decodes at ~4 ms a token on an H200, where its weights stream in ~20 us). There a round
pays only if it launches fewer kernels per emitted token than plain decoding. This counts, on any
backend, the primitives in every graph the engine hands to `mx.eval` / `mx.async_eval` (a
compiled function counts once, as it launches as one), by exporting each graph with
`mx.export_to_dot`: a device-independent stand-in for launches per token.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from bench.peers import add_workload_args, heldout_prompts


def primitives(arrays: list[Any]) -> collections.Counter[str]:
    """Primitive nodes, by name, in the unevaluated graph behind `arrays` (evaluated inputs
    are leaves)."""
    from workers import launch

    launch.idle()  # a graph walk must not meet a launch the launcher thread is scheduling
    buf = io.StringIO()
    mx.export_to_dot(buf, *[a for a in arrays if isinstance(a, mx.array)])
    return collections.Counter(
        re.findall(r'label ?= ?"([^"]+)"[^\]]*shape=rectangle', buf.getvalue())
    )


def count_primitives(arrays: list[Any]) -> int:
    return sum(primitives(arrays).values())


class Counter:
    """Wraps mx.eval / mx.async_eval while active, summing the primitives each one runs."""

    def __init__(self) -> None:
        self.ops = 0
        self.calls = 0
        self.by_name: collections.Counter[str] = collections.Counter()
        self.seconds = {"eval": 0.0, "async_eval": 0.0}  # inside MLX's own call
        self._saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> Counter:
        for name in ("eval", "async_eval"):
            real = getattr(mx, name)
            self._saved[name] = real

            def wrapped(*args: Any, _real: Callable[..., Any] = real, _name: str = name) -> Any:
                flat = [
                    a for arg in args for a in (arg if isinstance(arg, list | tuple) else [arg])
                ]
                found = primitives(flat)
                self.ops += sum(found.values())
                self.by_name.update(found)
                self.calls += 1
                t0 = time.perf_counter()
                out = _real(*args)
                self.seconds[_name] += time.perf_counter() - t0
                return out

            setattr(mx, name, wrapped)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in self._saved.items():
            setattr(mx, name, real)


class ProposalCounter:
    """Wraps a drafter's `propose` while active, counting the primitives of the graph behind
    each proposal's tokens: the head's steps (and the backlog it absorbs), the part of a
    round's graph that is the drafter's (the rest is the verify, accept and commit)."""

    def __init__(self, drafter: Any) -> None:
        self.drafter, self.ops, self.calls = drafter, 0, 0
        self.by_name: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> ProposalCounter:
        real = self.drafter.propose

        def propose(request: Any) -> Any:
            proposal = real(request)
            found = primitives([proposal.tokens])
            self.ops += sum(found.values())
            self.by_name.update(found)
            self.calls += 1
            return proposal

        self.drafter.propose = propose  # an instance attribute shadows the method
        return self

    def __exit__(self, *exc: object) -> None:
        del self.drafter.propose


def measure(
    model_dir: Path, prompts: list[list[int]], B: int, mtp: bool, depth: int, n: int, top: int
):
    from workers import Engine, SamplingParams

    engine = Engine.load(
        model_dir, drafter="mtp" if mtp else None, max_batch_size=B, draft_depth=depth
    )
    sp = SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)
    engine.generate(prompts[:B], [sp] * B)  # warm: compiled functions are traced once
    engine.take_round_stats()
    drafter = engine.drafter
    with Counter() as c, ProposalCounter(drafter) if drafter else contextlib.nullcontext() as d:
        t0 = time.perf_counter()
        outs = engine.generate(prompts, [sp] * len(prompts))
        secs = time.perf_counter() - t0
    stats = engine.take_round_stats()
    tokens = sum(len(o.tokens) for o in outs)
    decode = [s for s in stats if not s.num_prefill_tokens]
    per_round = {k: round(v / len(stats), 1) for k, v in c.by_name.most_common(top)}
    return {
        "tokens": tokens,
        "rounds": len(stats),
        "decode_rounds": len(decode),
        "graph_ops": c.ops,
        "evals": c.calls,
        "ops_per_token": c.ops / tokens,
        "evals_per_token": c.calls / tokens,
        "seconds": secs,
        # Host time inside async_eval per primitive it launched: encoding and dispatching.
        "async_eval_us_per_op": 1e6 * c.seconds["async_eval"] / max(1, c.ops),
        "eval_s": c.seconds["eval"],
        "primitives_per_round": per_round,  # the most frequent, prefill rounds included
        # The drafter's share: primitives behind the proposals' tokens, per round.
        "drafter_primitives_per_round": d.ops / len(stats) if d else 0.0,
        "drafter_primitives_by_name": (
            {k: round(v / len(stats), 1) for k, v in d.by_name.most_common(top)} if d else {}
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, max_tokens=48)
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--top", type=int, default=40, help="primitives listed per round")
    ap.add_argument("--out", type=Path, default=Path("bench/results/graph_ops_cpu.json"))
    args = ap.parse_args()
    prompts = heldout_prompts(args.model_dir, args.prompts)
    rows = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        for mtp in (False, True):
            r = measure(args.model_dir, prompts, B, mtp, args.depth, args.max_tokens, args.top)
            rows[f"B={B} {'mtp' if mtp else 'plain'}"] = r
            print(f"B={B} {'mtp' if mtp else 'plain'}: {json.dumps(r)}", flush=True)
    args.out.write_text(
        json.dumps({"model_dir": str(args.model_dir), "device": str(mx.default_device()),
                    "max_tokens": args.max_tokens, "depth": args.depth, "rows": rows}, indent=1)
    )  # fmt: skip


if __name__ == "__main__":
    main()
