"""Stop 41: where the demo's single stream loses to its decode speedup (2-core CPU, default model).

    PYTHONPATH=. python bench/results/s41/stream_split_cpu.py DEPTH ADAPTIVE(0|1) PROMPTS

As `workers.stream_speed` (one request at a time, plain and MTP engines in turns, warm), twice
over the prompts, timing every engine step: the first two steps of a request (its prefill, and
its first round) apart from the rest (decode rounds), so the request's speedup and the decode
rounds' speedup can be read apart.
"""

from __future__ import annotations

import collections
import sys
import time

from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def timed(engine: Engine, prompt: str, sp: SamplingParams) -> tuple[float, list[float], int]:
    steps: list[float] = []
    real = engine.step

    def step():  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = real()
        steps.append(time.perf_counter() - t)
        return out

    engine.step = step  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        tokens = len(engine.generate([prompt], sp)[0].tokens)
    finally:
        del engine.step
    return time.perf_counter() - t0, steps, tokens


def main() -> None:
    depth, adaptive, n = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    drafter = make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model)
    spec = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=1,
                  draft_depth=depth, adaptive_depth=adaptive, warm_up=True)  # fmt: skip
    sp = SamplingParams(max_tokens=64)
    prompts = heldout_prompts(n)
    for engine in (plain, spec):
        engine.generate(prompts[:1], sp)
    total: dict[str, float] = collections.defaultdict(float)
    for _ in range(2):
        for prompt in prompts:
            for name, engine in (("plain", plain), ("spec", spec)):
                wall, steps, tokens = timed(engine, prompt, sp)
                total[name] += wall
                total[name + "_tokens"] += tokens
                total[name + "_first2"] += sum(steps[:2])
                total[name + "_rest"] += sum(steps[2:])
                total[name + "_steps"] += len(steps)
    for key in sorted(total):
        print(key, round(total[key], 3))
    rate = {k: total[k + "_tokens"] / total[k] for k in ("plain", "spec")}
    per_token = {k: total[k + "_rest"] / total[k + "_tokens"] for k in ("plain", "spec")}
    print("speedup", round(rate["spec"] / rate["plain"], 3))
    print(
        "decode speedup (steps after the first two)",
        round(per_token["plain"] / per_token["spec"], 3),
    )


if __name__ == "__main__":
    main()
