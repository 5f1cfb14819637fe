"""s64, CPU: single-stream MTP with the head's prompt window at each of argv[1] (comma-separated),
against plain decoding: 16 held-out prompts x 64 tokens, each decoded alone, two reps, the order
of the engines alternating. Prints tokens/s and each ÷ plain."""

from __future__ import annotations

import sys
import time

from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    prompts = heldout_prompts(16)
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    engines = [("plain", plain)]
    for window in (int(x) for x in sys.argv[1].split(",")):
        drafter = make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model)
        drafter.prompt_window = window  # type: ignore[union-attr]
        spec = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=1,
                      draft_depth=5, adaptive_depth=True, warm_up=True)  # fmt: skip
        engines.append((f"pw{window}", spec))
    sp = SamplingParams(max_tokens=64)
    for _, engine in engines:
        engine.generate(prompts[:1], sp)
    seconds = {name: 0.0 for name, _ in engines}
    tokens = {name: 0 for name, _ in engines}
    for rep in range(2):
        for i, prompt in enumerate(prompts):
            for name, engine in engines if (i + rep) % 2 == 0 else engines[::-1]:
                t0 = time.perf_counter()
                out = engine.generate([prompt], sp)[0].tokens
                seconds[name] += time.perf_counter() - t0
                tokens[name] += len(out)
    rate = {name: tokens[name] / seconds[name] for name in seconds}
    print({k: round(v, 1) for k, v in rate.items()},
          {k: round(v / rate["plain"], 3) for k, v in rate.items()})  # fmt: skip


if __name__ == "__main__":
    main()
