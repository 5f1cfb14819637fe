"""MLX's CPU kernels built with and without the CPU's FMA/AVX2 (workers/cpu_jit.py), in turns.

    python -m bench.cpu_jit_ab [--pairs 4] [--max-tokens 96] --out F.json

A process's compiled kernels are built once, by name, so the two sides cannot share a process:
each side is a child process with its own empty kernel cache ($TMPDIR) and
SPECFLEET_CPU_JIT_FLAGS set to 1 or 0, the sides taking turns (`--pairs` of them). A child
times, on the embedded default model (fp32), a fused SiLU x gate kernel over [16, 16, 768] and
engine jobs after one untimed warm-up job each: plain decoding and the MTP head at depth 3 at
B=1 (4 prompts, one at a time), and plain and MTP depth 1 at B=16 (16 prompts at once), each
prompt `--max-tokens` tokens, prefix cache off. Prints and writes the medians of the pairs'
ratios (on ÷ off). Set LD_PRELOAD and BLIS_NUM_THREADS as `./run` does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {  # name -> (batch size, drafter, draft depth)
    "plain_b1": (1, None, 1),
    "mtp3_b1": (1, "mtp", 3),
    "plain_b16": (16, None, 1),
    "mtp1_b16": (16, "mtp", 1),
}


def child(max_tokens: int) -> dict:
    import mlx.core as mx
    import mlx.nn as nn

    from workers import Engine, SamplingParams, cpu_jit
    from workers.stream_speed import heldout_prompts

    out: dict = {"wrapper": str(cpu_jit.install())}
    x, g = mx.random.normal((16, 16, 768)), mx.random.normal((16, 16, 768))
    swiglu = mx.compile(lambda a, b: nn.silu(a) * b)
    mx.eval(swiglu(x, g))  # builds the kernel
    t0 = time.perf_counter()
    for _ in range(50):
        mx.eval(swiglu(x, g))
    out["swiglu_16x16x768_us"] = (time.perf_counter() - t0) / 50 * 1e6
    sp = SamplingParams(max_tokens=max_tokens)
    for name, (B, drafter, depth) in CONFIGS.items():
        engine = Engine.load(
            None, drafter=drafter, max_batch_size=B, draft_depth=depth, prefix_cache_tokens=0
        )
        prompts = heldout_prompts(max(B, 4))
        engine.generate(prompts[:B], SamplingParams(max_tokens=16))  # warm-up
        t0, tokens = time.perf_counter(), 0
        for i in range(0, len(prompts), B):
            tokens += sum(len(o.tokens) for o in engine.generate(prompts[i : i + B], sp))
        out[name] = tokens / (time.perf_counter() - t0)
    return out


def run_side(on: bool, max_tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        from workers.cpu_jit import ENV

        env = {**os.environ, "TMPDIR": tmp, ENV: "1" if on else "0"}  # off: install() drops
        # a wrapper inherited on PATH
        done = subprocess.run(
            [sys.executable, "-m", "bench.cpu_jit_ab", "--child", "--max-tokens", str(max_tokens)],
            env=env, capture_output=True, text=True, check=True, timeout=1200,
        )  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="bench/out/cpu_jit_ab.json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.max_tokens)))
        return
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for i in range(args.pairs):
        for side in ("on", "off") if i % 2 == 0 else ("off", "on"):  # each side first in turn
            runs[side].append(run_side(side == "on", args.max_tokens))
            print(side, json.dumps(runs[side][-1]), flush=True)
    keys = ["swiglu_16x16x768_us", *CONFIGS]
    ratios = {k: [b[k] / a[k] if k.endswith("_us") else a[k] / b[k]
                  for a, b in zip(runs["on"], runs["off"])] for k in keys}  # fmt: skip
    summary = {k: round(statistics.median(v), 3) for k, v in ratios.items()}
    print("on ÷ off (speed), medians of pairs:", json.dumps(summary))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "machine": f"{platform.machine()} {os.cpu_count()} cores, "
                   f"{os.environ.get('LD_PRELOAD', 'MLX bundled BLAS')}",
        "command": "python -m bench.cpu_jit_ab " + " ".join(sys.argv[1:]),
        "speed_on_over_off_median": summary,
        "speed_on_over_off_pairs": {k: [round(r, 3) for r in v] for k, v in ratios.items()},
        "runs": runs}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
