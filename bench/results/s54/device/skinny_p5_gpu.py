"""Stop 54 on the GPU: P5 on the current tree, and whether stop 53's default (few-row linears
through workers/skinny_linear.py on MLX CUDA) helps or costs P5's trained hybrid, which stop 53
did not measure (it read only random Qwen3 shapes).

    python3 bench/results/s54/device/skinny_p5_gpu.py --model-dir DIR [--batch-sizes 1,4,16]
        [--prompts 16,32,64] [--cap 4] [--max-tokens 96] [--spread 0.5] [--passes 4]

Per batch size, in one process: plain and adaptive MTP (up to `cap`, as a serving worker loads
it: warm-up on) with skinny on (the default) and off (`SPECFLEET_SKINNY_LINEAR=0` while the
engine loads: each engine loads its own copy of the weights, and the routes are per copy). One
untimed pass each, then `passes` rounds of all four in turns (bench/p5_pairs.py's timed_pass
and spread). Prints per batch size: MTP ÷ plain per setting (P5), each engine's skinny on ÷
off, tokens/s, accepted drafts a row-round, and rows equal to plain's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params, timed_pass
from bench.peers import heldout_prompts
from workers import Engine, skinny_linear


def load(model_dir: Path, B: int, cap: int, mtp: bool, skinny: bool) -> Engine:
    os.environ[skinny_linear.ENV] = "1" if skinny else "0"
    try:
        if not mtp:
            return Engine.load(model_dir, max_batch_size=B, warm_up=True)
        return Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=cap,
                           adaptive_depth=True, warm_up=True)  # fmt: skip
    finally:
        del os.environ[skinny_linear.ENV]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--prompts", default="16,32,64", help="prompts per batch size, in order")
    ap.add_argument("--cap", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--passes", type=int, default=4)
    args = ap.parse_args()
    for B, n in zip(
        [int(b) for b in args.batch_sizes.split(",")], [int(p) for p in args.prompts.split(",")]
    ):
        prompts = heldout_prompts(args.model_dir, n)
        sp = spread_params(n, args.max_tokens, args.spread)
        engines = {
            f"{kind}_{'on' if skinny else 'off'}": load(
                args.model_dir, B, args.cap, kind == "mtp", skinny
            )
            for skinny in (True, False)
            for kind in ("plain", "mtp")
        }
        routed = {k: sum(type(m) is skinny_linear.SkinnyLinear
                         for _, m in e.model.named_modules()) for k, e in engines.items()}  # fmt: skip
        rates: dict[str, list[float]] = {k: [] for k in engines}
        accepted: dict[str, float] = {}
        same = {}
        for p in range(args.passes + 1):  # pass 0: untimed
            outs = {}
            order = list(engines) if p % 2 else list(engines)[::-1]
            for name in order:
                r = timed_pass(engines[name], prompts, sp)
                outs[name] = r["outputs"]
                accepted[name] = r.get("accepted_per_row_round", 0.0)
                if p:
                    rates[name].append(r["tokens_per_s"])
            same = {k: sum(a == b for a, b in zip(outs["plain_on"], v)) for k, v in outs.items()}

        def med(a: str, b: str, rates: dict[str, list[float]] = rates) -> float:
            return round(statistics.median(x / y for x, y in zip(rates[a], rates[b])), 3)

        print(json.dumps({
            "batch_size": B, "prompts": n, "cap": args.cap, "device": str(mx.default_device()),
            "p5_mtp_over_plain": {"skinny_on": med("mtp_on", "plain_on"),
                                  "skinny_off": med("mtp_off", "plain_off")},
            "skinny_on_over_off": {"plain": med("plain_on", "plain_off"),
                                   "mtp": med("mtp_on", "mtp_off")},
            "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
            "skinny_linears_routed": routed,
            "accepted_per_row_round_last_pass": {k: round(accepted[k], 3) for k in engines},
            "rows_equal_to_plain_on_last_pass": same,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
