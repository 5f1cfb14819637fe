"""P3's third figure in turns: MTP at B = 1 (adaptive up to 5) and plain decoding against mlx-lm's
BatchGenerator, one held-out prompt at a time, in one process.

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. \
        python bench/results/s48/bg_b1_cpu.py PROMPTS REPS [MAX_TOKENS] > OUT.json

Each prompt (the embedded default model's held-out prompts, MAX_TOKENS new tokens, EOS
ignored: BatchGenerator runs to max_tokens) goes through BatchGenerator (mlx-lm's own modules,
`bench/engine.py run_batch_generator`), the plain engine and the MTP engine in turns (order
reversed every other rep), warm. Prints each one's tokens per second and the ratios.
"""

from __future__ import annotations

import json
import sys
import time

from bench.engine import run_batch_generator
from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    mtp = Engine(plain.model, plain.tokenizer,
                 drafter=make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model),
                 max_batch_size=1, draft_depth=5, adaptive_depth=True, warm_up=True)  # fmt: skip
    prompts = [plain.tokenizer.encode(p) for p in heldout_prompts(n)]
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)

    def bg(p: list[int]) -> int:
        return int(run_batch_generator(plain.model, [p], max_tokens, 1)["tokens"])

    def engine(e: Engine):  # type: ignore[no-untyped-def]
        return lambda p: len(e.generate([p], sp)[0].tokens)

    runs = {"batch_generator": bg, "plain": engine(plain), "mtp": engine(mtp)}
    for f in runs.values():
        f(prompts[0])  # warm
    seconds = {k: 0.0 for k in runs}
    tokens = {k: 0 for k in runs}
    for rep in range(reps):
        for p in prompts:
            for name in list(runs) if rep % 2 == 0 else list(reversed(runs)):
                t0 = time.perf_counter()
                tokens[name] += runs[name](p)
                seconds[name] += time.perf_counter() - t0
    rate = {k: tokens[k] / seconds[k] for k in runs}
    print(json.dumps({
        "machine": "2-core AMD EPYC VM, MLX 0.32.4 CPU, fp32, BLIS 1 thread",
        "prompts": n, "reps": reps, "max_tokens": max_tokens,
        "tokens_per_s": {k: round(v, 2) for k, v in rate.items()},
        "plain_over_batch_generator": round(rate["plain"] / rate["batch_generator"], 4),
        "mtp_over_batch_generator": round(rate["mtp"] / rate["batch_generator"], 4),
        "mtp_over_plain": round(rate["mtp"] / rate["plain"], 4),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
