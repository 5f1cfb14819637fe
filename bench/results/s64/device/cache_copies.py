"""s64: does a pipelined round copy each layer's whole KV cache when it writes its window?

    python3 bench/results/s64/device/cache_copies.py --out F.json [--preset 6b]

MLX writes a scatter's output into its input's buffer only when that input can be donated (no
other reference to the array or its buffer). A round built while the last one still runs may
find the cache's arrays held by that round, and then every layer's write copies its whole cache
first. This runs engines (random Qwen3, bf16; plain, and forced depth-4 rounds) over long prompts,
then records the peak memory above the active memory while decoding, against the cache's bytes:
a peak near 0 means the writes were in place. Pipelined engines against one-round-at-a-time ones
(pipeline=False), whose rounds finish before the next is built.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from bench.forced_drafter import DeviceForcedDrafter  # noqa: E402
from bench.gpu import PRESETS, qwen3_model  # noqa: E402
from workers import Engine, SamplingParams  # noqa: E402


def decode_memory(engine: Engine, prompts: list[list[int]], warm_steps: int = 6, steps: int = 16):
    sp = SamplingParams(max_tokens=steps * 6 + 40, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, sp)
    for _ in range(warm_steps):
        engine.step()
    engine.settle()
    mx.eval([a for layer in engine.cache.layers for a in layer.arrays()])
    cache = sum(a.nbytes for layer in engine.cache.layers for a in layer.arrays())
    active = mx.get_active_memory()
    mx.reset_peak_memory()
    t0 = time.perf_counter()
    for _ in range(steps):
        engine.step()
    engine.settle()
    seconds = (time.perf_counter() - t0) / steps
    peak = mx.get_peak_memory() - active
    while engine.has_work():
        engine.step()
    return {
        "cache_mib": cache / 2**20,
        "peak_over_active_mib": peak / 2**20,
        "ms_a_step": 1e3 * seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="6b")
    ap.add_argument("--cells", default="1:1500,8:1500", help="B:prompt_len,...")
    args = ap.parse_args()
    model, _ = qwen3_model(*PRESETS[args.preset])
    vocab = 32000
    rng = np.random.default_rng(0)
    rows = []
    for cell in args.cells.split(","):
        B, L = (int(x) for x in cell.split(":"))
        prompts = [rng.integers(0, vocab, L).tolist() for _ in range(B)]
        sp = SamplingParams(max_tokens=200, ignore_eos=True)
        refs = {
            tuple(p): o.tokens
            for p, o in zip(prompts, Engine(model, None, max_batch_size=B).generate(prompts, sp))
        }

        def forced(B: int = B, refs: dict = refs, pipeline: bool = True) -> Engine:
            return Engine(model, None, drafter=DeviceForcedDrafter(refs, vocab=vocab),
                          max_batch_size=B, draft_depth=4, pipeline=pipeline)  # fmt: skip

        makers = {
            "plain": lambda B=B: Engine(model, None, max_batch_size=B),
            "plain_sync": lambda B=B: Engine(model, None, max_batch_size=B, pipeline=False),
            "forced": forced,
            "forced_sync": lambda: forced(pipeline=False),
        }
        for rep in range(2):
            for name, make in makers.items():
                out = decode_memory(make(), prompts)
                if rep:
                    rows.append({"B": B, "prompt_len": L, "engine": name, **out})
                    print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(
        json.dumps({"device": str(mx.default_device()), "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
