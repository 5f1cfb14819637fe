"""A lone row's decode step with and without its attention mask, beside mlx-lm's
BatchGenerator, in one process (the configurations take turns; medians).

    python -m bench.lone_row_step [--presets default,1b,6b] [--repeats 4] --out F.json

`new`: the engine as it is (a lone row's one-token step reads exactly its slots, unmasked:
BatchCache.reads_exact_row). `old`: the same engine with that path turned off, so every step
hands attention a [1, 1, 1, S] mask and, on MLX CUDA, slots rounded up to 128. Plain decoding
(no drafter), B=1, four prompts of 16-63 random tokens, 64 new tokens each. The first pass of each configuration is dropped (kernel and
graph builds).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.engine import run_batch_generator, run_engine
from workers.kv_cache import BatchCache


def load(preset: str):
    if preset == "default":
        from mlx_lm import load as load_dir

        from workers.config import DEFAULT_MODEL_DIR
        from workers.loading import upcast_on_cpu

        model = load_dir(str(DEFAULT_MODEL_DIR / "target"))[0]
        upcast_on_cpu(model)
        return model, int(model.args.vocab_size), "embedded default model"
    from bench.gpu import PRESETS, qwen3_model

    model, n = qwen3_model(*PRESETS[preset])
    return model, 32000, f"random qwen3, {n / 1e9:.2f}B params, bf16"


def measure(preset: str, repeats: int) -> dict:
    model, vocab, name = load(preset)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, vocab, size=int(rng.integers(16, 64))).tolist() for _ in range(4)]
    exact = BatchCache.reads_exact_row
    passes: dict[str, list[float]] = {"bg": [], "new": [], "old": []}
    for rep in range(repeats + 1):
        bg = run_batch_generator(model, prompts, 64, 1)["tokens_per_s"]
        new = run_engine(model, None, None, prompts, 64, 1, 4)["tokens_per_s"]
        BatchCache.reads_exact_row = lambda self, W: False  # type: ignore[method-assign]
        try:
            old = run_engine(model, None, None, prompts, 64, 1, 4)["tokens_per_s"]
        finally:
            BatchCache.reads_exact_row = exact  # type: ignore[method-assign]
        if rep:  # pass 0 builds kernels and graphs
            for k, v in (("bg", bg), ("new", new), ("old", old)):
                passes[k].append(v)
    base = np.array(passes["bg"])
    return {
        "model": name,
        "new_over_batch_generator": float(np.median(np.array(passes["new"]) / base)),
        "old_over_batch_generator": float(np.median(np.array(passes["old"]) / base)),
        "new_over_old": float(np.median(np.array(passes["new"]) / np.array(passes["old"]))),
        "tokens_per_s_each_pass": {k: [round(x, 1) for x in v] for k, v in passes.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="default")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", default="bench/out/lone_row_step.json")
    args = ap.parse_args()
    res: dict = {
        "device": str(mx.default_device()),
        "machine": f"{platform.machine()} {platform.node()}",
        "repeats": args.repeats,
        "presets": {},
    }
    for preset in args.presets.split(","):
        res["presets"][preset] = row = measure(preset, args.repeats)
        print(preset, json.dumps({k: v for k, v in row.items() if k != "tokens_per_s_each_pass"}))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
