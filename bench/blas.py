"""Which BLAS MLX's CPU backend should preload on Linux: OpenBLAS vs BLIS (Debian packages).

    python -m bench.blas [--rounds 2] [--out bench/results/blas_cpu.json]

MLX's CPU matmuls call cblas_sgemm; `./run demo` preloads a Debian BLAS in its place. A
speculative verify multiplies 2-5 rows per sequence where plain decoding multiplies one, so
what a BLAS charges for skinny matrices decides whether drafting can pay on a CPU. Each
library runs in its own process (LD_PRELOAD is per process), alternating, `--rounds` times:
matmul times by row count, the default model's forward by window width (B=1), and the
single-stream speedup of its MTP head (workers/stream_speed.py: plain vs MTP, one process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

LIBS = {
    "openblas": "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "blis": "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4",
}


def _median_us(f, reps: int = 200, inner: int = 20) -> float:
    import mlx.core as mx

    for _ in range(5):
        mx.eval(f())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval([f() for _ in range(inner)])
        ts.append((time.perf_counter() - t0) / inner)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def child() -> dict:
    """Runs under one preloaded BLAS: matmul and forward costs, then the stream speedup."""
    import mlx.core as mx
    import numpy as np

    from workers import Engine
    from workers.forward import forward_window, prefill
    from workers.kv_cache import BatchCache
    from workers.stream_speed import heldout_prompts, measure

    out: dict = {"matmul_us": {}, "forward_ms": {}}
    for n in (768, 2048):  # the default model's MLP width and its lm_head (vocab)
        w = mx.random.normal((n, 256))
        for m in (1, 2, 3, 4, 5, 8, 32, 512):
            x = mx.random.normal((m, 256))
            mx.eval(w, x)
            out["matmul_us"][f"{m}x256x{n}"] = round(_median_us(lambda x=x, w=w: x @ w.T), 1)
    model = Engine.load().model
    prompt = list(range(1, 151))
    cache = BatchCache.for_model(model, 1)
    prefill(model, cache, [prompt], 512)
    for width in range(1, 6):
        tokens = mx.array([list(range(5, 5 + width))])
        valid = np.array([width])

        def fwd(tokens=tokens, valid=valid):
            return forward_window(model, cache, tokens, valid)

        us = _median_us(fwd, reps=60, inner=1)
        out["forward_ms"][str(width)] = round(us / 1e3, 3)
    out["stream"] = measure(None, "mtp", heldout_prompts(8), 64)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="bench/results/blas_cpu.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        json.dump(child(), sys.stdout)
        return
    runs: dict[str, list[dict]] = {name: [] for name in LIBS}
    for _ in range(args.rounds):
        for name, lib in LIBS.items():
            if not Path(lib).exists():
                sys.exit(f"{lib} is missing: apt-get install libopenblas0-pthread libblis4-pthread")
            env = dict(os.environ, LD_PRELOAD=lib, OPENBLAS_NUM_THREADS="1", BLIS_NUM_THREADS="1")
            cmd = [sys.executable, "-m", "bench.blas", "--child"]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(name, runs[name][-1]["stream"], file=sys.stderr)
    result = {
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores",
        "command": f"python -m bench.blas --rounds {args.rounds}",
        "runs": runs,
        "stream_speedup": {n: [r["stream"]["speedup"] for r in rs] for n, rs in runs.items()},
        "plain_tokens_per_s": {
            n: [r["stream"]["plain_tokens_per_s"] for r in rs] for n, rs in runs.items()
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("stream_speedup", "plain_tokens_per_s")}))


if __name__ == "__main__":
    main()
