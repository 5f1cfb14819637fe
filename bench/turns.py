"""Engines decoding the same prompt groups in turns, in one process: the CPU benchmarks' A/B
of a change against itself patched out (the VM's rates drift 10-20% between runs, so only
ratios taken in turns compare)."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from workers.engine import Engine
from workers.types import SamplingParams

Context = Callable[[], contextlib.AbstractContextManager[Any]]


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` is `value` while inside: a change patched out for an A/B's other side."""
    real = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, real)


def in_turns(
    engines: dict[str, Engine],
    groups: Sequence[Sequence[Any]],
    params: SamplingParams,
    reps: int,
    contexts: dict[str, Context] | None = None,
) -> dict[str, Any]:
    """Each group decoded by every engine in turn (the first engine, "plain", is the
    reference), each engine inside its context (None: nullcontext), REPS passes after one
    warm pass of the first group; every output checked equal to the first engine's.

    Returns the first engine's time over each other's (all passes and per pass), and each
    engine's drafting rounds per prompt."""
    contexts = contexts or {}
    first = next(iter(engines))

    def inside(name: str) -> contextlib.AbstractContextManager[Any]:
        return contexts.get(name, contextlib.nullcontext)()

    for name, e in engines.items():
        with inside(name):
            e.generate(list(groups[0]), params)
            e.take_round_stats()
    wall: dict[str, float] = collections.defaultdict(float)
    drafting: dict[str, int] = collections.defaultdict(int)
    passes = []
    for _ in range(reps):
        this: dict[str, float] = collections.defaultdict(float)
        for i, group in enumerate(groups):
            ref = None
            for name, e in engines.items():
                with inside(name):
                    t0 = time.perf_counter()
                    out = [list(o.tokens) for o in e.generate(list(group), params)]
                    dt = time.perf_counter() - t0
                wall[name] += dt
                this[name] += dt
                drafting[name] += sum(s.draft_depth > 0 for s in e.take_round_stats())
                ref = out if name == first else ref
                assert out == ref, (name, i)
        passes.append({k: round(this[first] / v, 3) for k, v in this.items() if k != first})
    prompts = reps * sum(len(g) for g in groups)
    return {
        f"{first}_over_engine": {
            k: round(wall[first] / v, 3) for k, v in wall.items() if k != first
        },
        "passes": passes,
        "drafting_rounds_per_request": {k: round(v / prompts, 2) for k, v in drafting.items()},
    }


def host_mtp_engines(
    batch_size: int, depth: int, adaptive: bool, contexts: dict[str, Context]
) -> dict[str, Engine]:
    """A plain engine ("plain", warm) and, for each name in `contexts`, an MTP engine with its
    own host drafter over the same model and the default head, built inside its context (the
    change under test patched in or out), warm: the engines `in_turns` compares on the CPU."""
    plain = Engine.load(None, drafter=None, max_batch_size=batch_size, warm_up=True)
    engines = {"plain": plain}
    for name, context in contexts.items():
        with context():
            engines[name] = host_mtp_engine(plain, depth, adaptive)
    return engines


def ab_main(contexts: dict[str, Context]) -> None:
    """A per-stop CPU A/B's command line, `DEPTH PROMPTS REPS ADAPTIVE [B]`: plain and one host
    MTP engine per name in `contexts` (each built and run inside its context), the held-out
    prompts in groups of B, in turns (`in_turns`); prints the settings and the result as JSON."""
    import json
    import sys

    from workers.stream_speed import heldout_prompts

    depth, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    adaptive = sys.argv[4] == "1"
    B = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    engines = host_mtp_engines(B, depth, adaptive, contexts)
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    groups = [prompts[i : i + B] for i in range(0, n, B)]
    result = in_turns(engines, groups, sp, reps, contexts)
    settings = {"depth": depth, "adaptive": adaptive, "batch_size": B, "prompts": n, "reps": reps}
    print(json.dumps({**settings, **result}))


def host_mtp_engine(
    plain: Engine,
    depth: int,
    adaptive: bool,
    warm_up: bool = True,
    drafter: Any = None,
    **config: Any,
) -> Engine:
    """An MTP engine over `plain`'s model, tokenizer and batch size: `drafter`, or a host
    drafter of the default model's head (the drafter `Engine.load` picks on the CPU); `config`:
    further EngineConfig settings (pipeline_depth, ...)."""
    from workers.drafters.mtp_host import HostMTPDrafter

    if drafter is None:
        drafter = HostMTPDrafter(plain.model, default_head())
    return Engine(plain.model, plain.tokenizer, drafter=drafter,
                  max_batch_size=plain.config.max_batch_size, draft_depth=depth,
                  adaptive_depth=adaptive, warm_up=warm_up, **config)  # fmt: skip


def default_head() -> Any:
    """The default model's MTP head (loaded once a process)."""
    global _HEAD
    if _HEAD is None:
        _HEAD = Engine.load(None, drafter="mtp", max_batch_size=1).drafter.head  # type: ignore[union-attr]
    return _HEAD


_HEAD: Any = None


def demo_worker_engine(drafter: str | None) -> Engine:
    """An engine as a worker of the demo's batch job builds it (workers/service/engine_spec.py):
    the serving defaults (adaptive depth, warm-up, prefix cache), 16 rows, drafts up to the
    demo's batch depth of 3, the embedded default model."""
    from workers.service.engine_spec import EngineSpec, serving_config

    spec = EngineSpec(drafter=drafter, config=serving_config(draft_depth=3, max_batch_size=16))
    return spec.build()  # type: ignore[no-any-return]
