"""GPU: the device kernels behind one engine forward at W=1 and at a verify window, per kernel.

    python -m bench.kernel_profile [--preset 6b] [--window 5] [--rows 1] --out F.json

MLX has no per-kernel device timer, but CUPTI records every kernel launched in a process, MLX's
included: this runs the engine's forward (workers/forward.forward_window over a BatchCache
holding 128 tokens a row, every route the engine installs) under `torch.profiler` with CUDA
activity. It needs PyTorch in the same Python (not a specfleet dependency: the lent GPU
machines ship it; put its site-packages at the end of PYTHONPATH). Prints and writes, per
width, the synced forward's wall time, the kernels' summed device time and the kernels that
take the most of it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.forward_timing import forward_cells
    from bench.gpu import PRESETS, qwen3_model
    from workers.forward import forward_window

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="6b", choices=sorted(PRESETS))
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--forwards", type=int, default=10, help="forwards profiled per width")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("bench/out/kernel_profile.json"))
    args = ap.parse_args()
    model, _ = qwen3_model(*PRESETS[args.preset])
    shapes = [(args.rows, 1), (args.rows, args.window)]
    cells = forward_cells(model, shapes, vocab=int(model.args.vocab_size))
    torch.zeros(1, device="cuda")  # a CUDA context for CUPTI before the profiled forwards
    N, res = args.forwards, {}
    for (B, W), (cache, tokens, valid) in cells.items():
        for _ in range(3):  # kernels built, graphs cached
            mx.eval(forward_window(model, cache, tokens, valid))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(N):
                mx.eval(forward_window(model, cache, tokens, valid))
            wall = (time.perf_counter() - t0) / N
        kernels = sorted(
            ((e.key, e.self_device_time_total / N, e.count / N) for e in prof.key_averages()),
            key=lambda k: -k[1],
        )
        device_us = sum(us for _, us, _ in kernels)
        res[f"B={B} W={W}"] = {
            "synced_forward_ms": wall * 1e3,
            "device_kernel_ms": device_us / 1e3,
            "kernels": [
                {"name": name[:160], "us_per_forward": us, "calls_per_forward": calls}
                for name, us, calls in kernels[: args.top]
                if us > 0
            ],
        }
        print(f"B={B} W={W}: synced forward {wall * 1e3:.2f} ms, kernels {device_us / 1e3:.2f} ms")
        for k in res[f"B={B} W={W}"]["kernels"]:
            print(
                f"  {k['us_per_forward']:8.1f} us  {k['calls_per_forward']:6.1f} calls  {k['name'][:90]}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": str(mx.default_device()), "preset": args.preset,
                                    "rows": res}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
