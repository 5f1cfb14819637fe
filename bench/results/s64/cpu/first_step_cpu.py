"""s64, CPU: a lone request's first step (its prefill and first round, run synchronously) and
second step, with the parts of the first, plain against MTP (adaptive, depth up to 5): medians
over 16 held-out prompts, each decoded alone, 64 tokens."""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable
from typing import Any

from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

TIMES: dict[str, list[float]] = collections.defaultdict(list)


def timed(owner: Any, name: str, tag: str) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        TIMES[tag].append(1e3 * (time.perf_counter() - t0))
        return out

    setattr(owner, name, wrapper)


def main() -> None:
    prompts = heldout_prompts(16)
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    drafter = make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model)
    spec = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=1,
                  draft_depth=5, adaptive_depth=True, warm_up=True)  # fmt: skip
    sp = SamplingParams(max_tokens=64)
    engines = (("plain", plain), ("spec", spec))
    for name, engine in engines:
        engine.generate(prompts[:1], sp)
        timed(engine, "_round", f"{name} _round")
        if engine.drafter is not None:
            for part in ("add_rows", "_pairs_hidden", "_prompt_pairs"):
                timed(engine.drafter, part, f"{name} {part}")
    for i, prompt in enumerate(prompts):
        for name, engine in engines:
            engine.add_request(f"r{i}", prompt, sp)
            for which in ("first", "second"):
                t0 = time.perf_counter()
                engine.step()
                TIMES[f"{name} {which} step"].append(1e3 * (time.perf_counter() - t0))
            while engine.has_work():
                engine.step()
    for key in sorted(TIMES):
        print(f"{key:28s} n={len(TIMES[key]):4d} median {statistics.median(TIMES[key]):7.2f} ms")


if __name__ == "__main__":
    main()
