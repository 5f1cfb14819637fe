"""The demo's batch job as its workers see it: cold engines, two processes side by side.

    python -m bench.cold_batch [--pairs 4] [--batch-size 16] [--max-tokens 64] [--out F]

`./run demo` gives each of its two workers 32 of the 64 held-out prompts, on a freshly started
engine, while the other worker runs on the second core. This runs exactly that without Ray,
gRPC or the scheduler (whose noise, ±8% per demo run, hides a few percent): per variant, two
processes at once, each loading its engine (untimed, warm-up included) and then running its
half of the prompts as one job (timed); the job's time is the slower process's. Variants
alternate, `--pairs` times: plain (no drafter), MTP adaptive with no warm-up, MTP adaptive with
the serving warm-up (workers/warm_up.py). Prints and writes JSON: tokens/s per run and each
MTP variant's ratio to the plain run beside it.
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

VARIANTS = {
    "plain": {"drafter": None},
    "plain_warm_up": {"drafter": None, "warm_up": True},  # CPU, Metal: builds kernels only
    "mtp_cold": {"drafter": "mtp", "adaptive_depth": True, "draft_depth": 3},
    "mtp_warm_up": {"drafter": "mtp", "adaptive_depth": True, "draft_depth": 3, "warm_up": True},
    "mtp_fixed": {"drafter": "mtp", "draft_depth": 3},  # --variants only (GPU: --fixed-depth)
}
DEFAULT_VARIANTS = "plain,mtp_cold,mtp_warm_up"


def child(variant: str, half: int, processes: int, batch_size: int, max_tokens: int) -> None:
    from workers import Engine, SamplingParams
    from workers.stream_speed import heldout_prompts

    prompts = heldout_prompts(64)[half::processes]  # the scheduler's split, roughly
    kw = dict(VARIANTS[variant])
    t0 = time.perf_counter()
    engine = Engine.load(None, max_batch_size=batch_size, prefix_cache_tokens=-1, **kw)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens))
    seconds = time.perf_counter() - t0
    stats = engine.take_round_stats()
    print(json.dumps({
        "seconds": seconds,
        "load_s": load_s,
        "tokens": sum(len(o.tokens) for o in outs),
        "drafting_rounds": sum(1 for s in stats if s.num_drafts),
        "rounds": sum(1 for s in stats if s.batch_size),
    }))  # fmt: skip


def pair(variant: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "bench.cold_batch", "--child", variant,
           "--batch-size", str(args.batch_size), "--max-tokens", str(args.max_tokens),
           "--processes", str(args.processes)]  # fmt: skip
    procs = [
        subprocess.Popen(cmd + ["--half", str(h)], stdout=subprocess.PIPE, text=True)
        for h in range(args.processes)
    ]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    seconds = max(o["seconds"] for o in outs)
    return {
        "tokens_per_s": round(sum(o["tokens"] for o in outs) / seconds, 1),
        "seconds": [round(o["seconds"], 3) for o in outs],
        "load_s": [round(o["load_s"], 2) for o in outs],
        "drafting_rounds": [o["drafting_rounds"] for o in outs],
        "rounds": [o["rounds"] for o in outs],
    }


def _device() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import mlx.core as mx; print(mx.default_device())"],
        capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default="bench/results/cold_batch_cpu.json")
    ap.add_argument("--processes", type=int, default=2, help="1: one engine, all 64 prompts")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"of {sorted(VARIANTS)}")
    ap.add_argument("--child", choices=sorted(VARIANTS))
    ap.add_argument("--half", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.half, args.processes, args.batch_size, args.max_tokens)
        return
    names = args.variants.split(",")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.pairs):
        for name in names:
            runs[name].append(pair(name, args))
            print(name, json.dumps(runs[name][-1]), file=sys.stderr)
    plain = [r["tokens_per_s"] for r in runs["plain"]]
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, "
        f"{os.environ.get('LD_PRELOAD', 'no BLAS preload')}",
        "device": _device(),
        "command": f"python -m bench.cold_batch --pairs {args.pairs} --batch-size "
        f"{args.batch_size} --max-tokens {args.max_tokens} --processes {args.processes} "
        f"--variants {args.variants}",
        "runs": runs,
        "ratio_to_plain": {
            name: [round(r["tokens_per_s"] / p, 3) for p, r in zip(plain, rs)]
            for name, rs in runs.items()
            if name != "plain"
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["ratio_to_plain"]))


if __name__ == "__main__":
    main()
