"""Stop 53 (restored in stop 64, with --context): one engine job (B rows, `--tokens` each) between cuProfilerStart and cuProfilerStop,
plain or with the always-right drafter at depth 4, after an untimed warm-up job on a fresh
engine of the same kind, for Nsight Systems to lay out (device busy vs idle per round):

    nsys profile --capture-range=cudaProfilerApi -o F python3 \
        bench/results/s53/device/round_timeline_gpu.py --preset 6b --forced

Prints the job's wall time and steps, so device time per step can be set against it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time

import mlx.core as mx
import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="6b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--forced", action="store_true")
    ap.add_argument("--context", type=int, default=40, help="prompt tokens a row")
    args = ap.parse_args()
    model, _ = qwen3_model(*PRESETS[args.preset])
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 32000, size=args.context).tolist() for _ in range(args.batch)]
    sp = SamplingParams(max_tokens=args.tokens, ignore_eos=True)
    ref = Engine(model, None, max_batch_size=args.batch).generate(prompts, sp)
    refs = {tuple(p): o.tokens + [0] * 8 for p, o in zip(prompts, ref)}

    def engine() -> Engine:
        d = DeviceForcedDrafter(refs, vocab=32000) if args.forced else None
        return Engine(model, None, drafter=d, max_batch_size=args.batch, draft_depth=4)

    engine().generate(prompts, sp)  # warm: every shape of the job built once
    e = engine()
    mx.synchronize()
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuProfilerStart()
    t0 = time.perf_counter()
    out = e.generate(prompts, sp)
    dt = time.perf_counter() - t0
    mx.synchronize()
    cuda.cuProfilerStop()
    steps = len([s for s in e.take_round_stats() if s.batch_size])
    same = [a.tokens == b.tokens for a, b in zip(out, ref)]
    print(json.dumps({"wall_ms": 1e3 * dt, "steps": steps, "ms_per_step": 1e3 * dt / steps,
                      "identical": all(same)}))  # fmt: skip


if __name__ == "__main__":
    main()
