"""GPU: where a verify window's extra cost goes, part by part (6.6B random Qwen3, B=1).

    python -m bench.verify_parts --out F.json [--routes]

The engine's forward (workers/forward.forward_window through BatchCache, the CUDA attention
route installed) at W=1 and W=5, 128 tokens in the cache, with one part at a time replaced by
an identity: attention, RoPE, RMSNorms, the MLP, the cache write (the window's keys and values
not scattered into the cache; attention reads the same slots). Medians of interleaved passes; the W=5 - W=1 difference each part removes is its share
of what a verify costs over a decode step. Prints and writes JSON.

Each forward is timed three ways: synced (build, encode and compute in series, as `bench.gpu`'s
`verify_over_decode_time`), pipelined (each forward launched before the last one finished, as
the engine's rounds run: where the device bounds the forward this is its device time), and the
host's own parts (Python building the graph, `mx.async_eval` encoding it). `--routes` installs
the linear routes an engine installs (workers/routes.py: stacked q/k/v and gate/up, per-row
gemvs, the skinny kernel), so the split is the engine's verify as it runs now.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

PARTS = ("full", "no_attention", "no_rope", "no_norm", "no_mlp", "no_cache_write")
HOWS = ("synced", "pipelined", "build", "encode")  # how a forward is timed (see above)


def _read_only(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
    """RaggedKVCache.update_and_fetch without the window's scatter: same shapes, stale slots."""
    needed = self.owner.window_end(keys.shape[2])
    return self.fetch(self.key_parts, needed), self.fetch(self.value_parts, needed)


def main() -> None:
    from mlx_lm.models import qwen3

    from bench.forward_timing import forward_cells, time_forward, time_forward_pipelined, time_host
    from bench.gpu import PRESETS, qwen3_model
    from workers.kv_layers import RaggedKVCache

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/verify_parts.json")
    ap.add_argument("--preset", default="6b")
    ap.add_argument("--model-dir", help="a qwen3 checkpoint instead (fp32 on the CPU)")
    ap.add_argument("--window", type=int, default=5, help="verify window (tokens)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--routes", action="store_true", help="the engine's linear routes installed")
    args = ap.parse_args()
    if args.model_dir:
        from mlx_lm import load

        from workers.loading import upcast_on_cpu

        model = load(args.model_dir)[0]
        upcast_on_cpu(model)
    else:
        model, _ = qwen3_model(*PRESETS[args.preset])
    if args.routes:
        from workers import routes
        from workers.backend import Backend

        routes.install(model, Backend.current())
    vocab = int(model.args.vocab_size)
    # BatchCache.for_model installs the CUDA attention route
    shapes = [(1, 1), (1, args.window)]
    cells = {W: cell for (_, W), cell in forward_cells(model, shapes, vocab=vocab).items()}
    sdpa, rope, norm = qwen3.scaled_dot_product_attention, nn.RoPE.__call__, nn.RMSNorm.__call__
    mlp, write = qwen3.MLP.__call__, RaggedKVCache.update_and_fetch
    times: dict[str, list[float]] = {}
    for rep in range(args.repeats + 1):
        for part in PARTS:
            if part == "no_attention":
                qwen3.scaled_dot_product_attention = (
                    lambda q, k, v, cache, scale, mask, sinks=None: q
                )
            if part == "no_rope":
                nn.RoPE.__call__ = lambda self, x, offset=0: x  # type: ignore[method-assign]
            if part == "no_norm":
                nn.RMSNorm.__call__ = lambda self, x: x  # type: ignore[method-assign]
            if part == "no_mlp":
                qwen3.MLP.__call__ = lambda self, x: x  # type: ignore[method-assign]
            if part == "no_cache_write":
                RaggedKVCache.update_and_fetch = _read_only  # type: ignore[method-assign]
            try:
                for W, cell in cells.items():
                    timed = {
                        "synced": time_forward(model, cell),
                        "pipelined": time_forward_pipelined(model, cell),
                        **dict(zip(("build", "encode"), time_host(model, cell))),
                    }
                    for how, t in timed.items():
                        if rep:
                            times.setdefault(f"{part} W={W} {how}", []).append(t)
            finally:
                qwen3.scaled_dot_product_attention, nn.RoPE.__call__ = sdpa, rope  # type: ignore[method-assign]
                nn.RMSNorm.__call__, qwen3.MLP.__call__ = norm, mlp  # type: ignore[method-assign]
                RaggedKVCache.update_and_fetch = write  # type: ignore[method-assign]
    rows = []
    for part in PARTS:
        for how in HOWS:
            one, five = (
                1e3 * float(np.median(times[f"{part} W={w} {how}"])) for w in (1, args.window)
            )
            rows.append(
                {"part": part, "timing": how, "w1_ms": one, "w5_ms": five, "extra_ms": five - one}
            )
            print(
                f"{part:15s} {how:9s} W=1 {one:6.2f} ms  W={args.window} {five:6.2f} ms  "
                f"extra {five - one:5.2f}",
                flush=True,
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"device": str(mx.default_device()), "routes": args.routes, "rows": rows})
    )


if __name__ == "__main__":
    main()
