"""P4 in pairs: a drafter that does not pay (the embedded draft model kept 4-bit: on MLX's CPU
backend its quantized matmuls are tens of times slower than the target's fp32 ones), adaptive
depth, against the plain engine; the two take turns in one process on the same prompts.

    python -m bench.p4_pairs [--batch-sizes 1,4,8] [--pairs 4] [--max-tokens 32] [--out F.json]

bench/engine.py runs each configuration once per batch size, so its P4 ratio is one pass of
each, minutes apart (0.93 at B=8 in its newest run). Here every pair is plain, then the slow
drafter adaptive, and the ratio is the median over the pairs. Each engine is new, as a worker's
is: the draft model's cost is measured when the engine attaches it (workers/drafting.py), and
a drafter that cannot pay is set aside there (`drafter_off` says why).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import mlx.core as mx

from bench.engine import load_models, prompts_for, run_engine, slow_draft
from workers import Engine, ModelDrafter


def one_pair(target, tok, slow, prompts, B: int, args: argparse.Namespace) -> tuple[dict, dict]:
    """A plain engine's pass, then the slow drafter's with adaptive depth (fresh engines)."""
    plain = run_engine(target, tok, None, prompts, args.max_tokens, B, 1)
    drafter = ModelDrafter(slow)
    adaptive = run_engine(target, tok, drafter, prompts, args.max_tokens, B, args.depth,
                          adaptive=True)  # fmt: skip
    return plain, adaptive


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,4,8")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--out", default="bench/out/p4_pairs.json")
    args = ap.parse_args()
    target, tok, draft, model_name = load_models(
        argparse.Namespace(real=False, model=None, draft=None)
    )
    if draft is None:
        raise SystemExit("P4 needs the embedded draft model (workers/default_model/draft)")
    slow = slow_draft(draft)
    off = Engine(target, tok, drafter=ModelDrafter(slow), draft_depth=args.depth,
                 adaptive_depth=True).drafter_off  # fmt: skip
    res: dict = {
        "model": model_name,
        "machine": f"{platform.machine()} {mx.default_device()}",
        "max_tokens": args.max_tokens,
        "draft_depth": args.depth,
        "drafter_off": off,
        "batch": {},
    }
    vocab = int(target.args.vocab_size)
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        prompts = prompts_for(tok, max(args.prompts, B), vocab)
        one_pair(target, tok, slow, prompts, B, args)  # warm-up: kernels, buffers
        pairs, rates = [], []
        for _ in range(args.pairs):
            p, s = one_pair(target, tok, slow, prompts, B, args)
            pairs.append(s["tokens_per_s"] / p["tokens_per_s"])
            rates.append((p["tokens_per_s"], s["tokens_per_s"], s["mean_acceptance_length"]))
        res["batch"][str(B)] = {
            "slow_adaptive_over_plain_median": statistics.median(pairs),
            "pairs": [round(x, 4) for x in pairs],
            "plain_tokens_per_s": [round(r[0], 1) for r in rates],
            "slow_adaptive_tokens_per_s": [round(r[1], 1) for r in rates],
            "slow_adaptive_mean_acceptance_length": [round(r[2], 3) for r in rates],
        }
        print(f"B={B}: slow adaptive / plain {statistics.median(pairs):.3f} "
              f"{[round(x, 3) for x in pairs]}", flush=True)  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
