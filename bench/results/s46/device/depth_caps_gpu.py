"""Stop 46 on the GPU: the adaptive depth's cap on P5's trained hybrid, at small batches.

    python3 bench/results/s46/device/depth_caps_gpu.py --model-dir DIR [--batch-sizes 1,4]
        [--prompts 16,32] [--caps 3,4,5] [--max-tokens 96] [--spread 0.5] [--passes 4]

P5 has been read with adaptive depth up to 3 (bench/peers.py's depth, shared with mlx-vlm's
MTP). Per batch size, in one process: plain and one MTP engine per cap, each loaded as a
serving worker runs it (adaptive depth up to the cap, warm-up), one untimed pass each, then
`passes` rounds of all of them in turns (bench/p5_pairs.py's timed_pass and spread). Prints,
per batch size, each cap's MTP ÷ plain per pass and its median, and its accepted drafts a
row-round.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params, timed_pass
from bench.peers import heldout_prompts
from workers import Engine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--prompts", default="16,32", help="prompts per batch size, in order")
    ap.add_argument("--caps", default="3,4,5")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--passes", type=int, default=4)
    args = ap.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    for B, n in zip(
        [int(b) for b in args.batch_sizes.split(",")], [int(p) for p in args.prompts.split(",")]
    ):
        prompts = heldout_prompts(args.model_dir, n)
        sp = spread_params(n, args.max_tokens, args.spread)
        engines = {"plain": Engine.load(args.model_dir, max_batch_size=B, warm_up=True)}
        for c in caps:
            engines[f"cap{c}"] = Engine.load(args.model_dir, drafter="mtp", max_batch_size=B,
                                             draft_depth=c, adaptive_depth=True, warm_up=True)  # fmt: skip
        rates: dict[str, list[float]] = {k: [] for k in engines}
        accepted: dict[str, float] = {}
        same = {}
        for p in range(args.passes + 1):  # pass 0: untimed
            outs = {}
            for name, e in engines.items():
                r = timed_pass(e, prompts, sp)
                outs[name] = r["outputs"]
                accepted[name] = r.get("accepted_per_row_round", 0.0)
                if p:
                    rates[name].append(r["tokens_per_s"])
            same = {k: sum(a == b for a, b in zip(outs["plain"], v)) for k, v in outs.items()}
        names = [k for k in engines if k != "plain"]
        ratio = {k: [m / q for m, q in zip(rates[k], rates["plain"])] for k in names}
        print(json.dumps({
            "batch_size": B, "prompts": n, "device": str(mx.default_device()),
            "mtp_over_plain_median": {k: round(statistics.median(v), 3) for k, v in ratio.items()},
            "mtp_over_plain_passes": {k: [round(x, 3) for x in v] for k, v in ratio.items()},
            "accepted_per_row_round_last_pass": {k: round(accepted[k], 3) for k in names},
            "plain_tokens_per_s": [round(x, 1) for x in rates["plain"]],
            "rows_equal_to_plain_last_pass": same,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
