"""Stop 52: the kernels of one target forward over a window of W tokens (W = 1: a decode step;
W = 5: a depth-4 verify), B = 1, on MLX CUDA, for Nsight Compute to time one by one:

    MLX_USE_CUDA_GRAPHS=0 ncu --profile-from-start off --cache-control none \
        --metrics gpu__time_duration.sum --csv \
        python3 bench/results/s52/device/kernel_split_gpu.py --window 5 > kernels_w5.csv

Only the forward after the warm-up runs between cuProfilerStart and cuProfilerStop.
`--skinny` routes the attention projections through workers/skinny_linear.py, as the engine
does with SPECFLEET_SKINNY_LINEAR=1.
"""

from __future__ import annotations

import argparse
import ctypes

import mlx.core as mx
import numpy as np

from bench.gpu import PRESETS, qwen3_model
from workers import routes, skinny_linear
from workers.backend import Backend
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="6b")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--skinny", action="store_true")
    args = ap.parse_args()
    model, _ = qwen3_model(*PRESETS[args.preset])
    routes.install(model, Backend.current())  # the engine's routes (attention kernel, ...)
    if args.skinny:
        skinny_linear.install(model)
    rng = np.random.default_rng(0)
    vocab = model.args.vocab_size
    cache = BatchCache.for_model(model, 1)
    prefill(model, cache, [rng.integers(0, vocab, args.context).tolist()], 512)
    tokens, valid = pad_windows([rng.integers(0, vocab, args.window).tolist()])
    for _ in range(3):
        mx.eval(forward_window(model, cache, tokens, valid))  # warm: kernels built, cached
    mx.synchronize()
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuProfilerStart()
    mx.eval(forward_window(model, cache, tokens, valid))
    mx.synchronize()
    cuda.cuProfilerStop()


if __name__ == "__main__":
    main()
