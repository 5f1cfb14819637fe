"""Stop 44 on the GPU: joiners drafting from their first round, on P5's trained hybrid.

    python3 bench/results/s44/device/first_round_gpu.py --model-dir DIR [--batch-sizes 1,16]
        [--prompts 16,64] [--max-tokens 96] [--spread 0.5] [--passes 4]

Per batch size, in one process: plain, `held` (this stop's MTPDrafter) and `waits` (the same
drafter with `hold_last_pairs` patched out while it runs: the drafter before this stop), each
loaded as a serving worker runs it (adaptive depth up to 3, warm-up), one untimed pass each
(MLX CUDA builds kernels and graphs per shape), then `passes` rounds of the three in turns
(bench/p5_pairs.py's timed_pass and spread: rows end apart, as served requests do). Prints,
per batch size, each pass's and the median MTP ÷ plain for held and for waits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params, timed_pass
from bench.peers import heldout_prompts
from workers import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from first_round_cpu import waits_for_a_verify  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="1,16")
    ap.add_argument("--prompts", default="16,64", help="prompts per batch size, in order")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--passes", type=int, default=4)
    args = ap.parse_args()
    for B, n in zip(
        [int(b) for b in args.batch_sizes.split(",")], [int(p) for p in args.prompts.split(",")]
    ):
        prompts = heldout_prompts(args.model_dir, n)
        sp = spread_params(n, args.max_tokens, args.spread)
        served = {"adaptive_depth": True, "warm_up": True}
        engines = {"plain": Engine.load(args.model_dir, max_batch_size=B, warm_up=True)}
        for name in ("held", "waits"):
            with waits_for_a_verify() if name == "waits" else contextlib.nullcontext():
                engines[name] = Engine.load(args.model_dir, drafter="mtp", max_batch_size=B,
                                            draft_depth=3, **served)  # fmt: skip
        rates: dict[str, list[float]] = {k: [] for k in engines}
        same = {}
        for p in range(args.passes + 1):  # pass 0: untimed
            outs = {}
            for name, e in engines.items():
                with waits_for_a_verify() if name == "waits" else contextlib.nullcontext():
                    r = timed_pass(e, prompts, sp)
                outs[name] = r["outputs"]
                if p:
                    rates[name].append(r["tokens_per_s"])
            same = {k: sum(a == b for a, b in zip(outs["plain"], v)) for k, v in outs.items()}
        ratio = {k: [m / q for m, q in zip(rates[k], rates["plain"])] for k in ("held", "waits")}
        print(json.dumps({
            "batch_size": B, "prompts": n, "device": str(mx.default_device()),
            "mtp_over_plain_median": {k: round(statistics.median(v), 3) for k, v in ratio.items()},
            "mtp_over_plain_passes": {k: [round(x, 3) for x in v] for k, v in ratio.items()},
            "plain_tokens_per_s": [round(x, 1) for x in rates["plain"]],
            "rows_equal_to_plain_last_pass": same,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
