"""Speculative rounds on MLX CUDA with verify windows over short contexts attending through the
ragged kernel (workers/attention_cuda.WIDE_MAX_SLOTS) against one-token steps only, same
process, taking turns (3 timed passes after an untimed one; medians).

    python -m bench.ragged_window_ab --out F.json

Rows: the embedded default model with its MTP head at fixed depth 3, and the 0.87B random
Qwen3 with the forced (always-right) drafter at depth 4; B=1 and B=8; 64 new tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.engine import run_batch_generator
from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams, attention_cuda
from workers.drafters.mtp import MTPDrafter


def tokens_per_s(make, prompts, sp) -> float:
    import time

    engine = make()
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    return sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/ragged_window_ab.json")
    args = ap.parse_args()
    from mlx_lm import load

    from workers.config import DEFAULT_MODEL_DIR

    default = load(str(DEFAULT_MODEL_DIR / "target"))[0]
    small, _ = qwen3_model(*PRESETS["1b"])
    sp = SamplingParams(max_tokens=64, ignore_eos=True)
    wide = attention_cuda.WIDE_MAX_SLOTS
    res: dict = {"device": str(mx.default_device()), "wide_max_slots": wide, "rows": {}}
    for name, model, vocab in (("default+mtp", default, 2048), ("0.87B+forced", small, 32000)):
        for B in (1, 8):
            rng = np.random.default_rng(B)
            prompts = [rng.integers(0, vocab, int(rng.integers(16, 64))).tolist() for _ in range(B)]
            if name.startswith("default"):
                make = lambda m=model, b=B: Engine(  # noqa: E731
                    m, drafter=MTPDrafter.from_target(m, str(DEFAULT_MODEL_DIR / "target")),
                    max_batch_size=b, draft_depth=3,
                )  # fmt: skip
            else:
                refs = {tuple(p): o.tokens for p, o in zip(prompts, Engine(model, max_batch_size=B).generate(prompts, sp))}  # fmt: skip
                make = lambda m=model, r=refs, v=vocab, b=B: Engine(  # noqa: E731
                    m, drafter=DeviceForcedDrafter(r, v), max_batch_size=b, draft_depth=4
                )  # fmt: skip
            passes: dict[str, list[float]] = {"wide": [], "one_token": [], "bg": []}
            for rep in range(4):
                attention_cuda.WIDE_MAX_SLOTS = wide
                a = tokens_per_s(make, prompts, sp)
                attention_cuda.WIDE_MAX_SLOTS = 0  # windows of 2-8 tokens take MLX's path
                b = tokens_per_s(make, prompts, sp)
                attention_cuda.WIDE_MAX_SLOTS = wide
                bg = run_batch_generator(model, prompts, 64, B)["tokens_per_s"]
                if rep:
                    passes["wide"].append(a), passes["one_token"].append(b), passes["bg"].append(bg)
            row = {
                "wide_over_one_token": float(np.median(np.array(passes["wide"]) / np.array(passes["one_token"]))),
                "wide_over_bg": float(np.median(np.array(passes["wide"]) / np.array(passes["bg"]))),
                "one_token_over_bg": float(np.median(np.array(passes["one_token"]) / np.array(passes["bg"]))),
                "passes": {k: [round(x, 1) for x in v] for k, v in passes.items()},
            }  # fmt: skip
            res["rows"][f"{name} B={B}"] = row
            print(f"{name} B={B}", json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
