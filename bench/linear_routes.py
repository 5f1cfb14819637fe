"""Which linear calls of a decode round take which route, and how many a round makes.

    python -m bench.linear_routes --model-dir DIR [--batch-size 8] [--depth 4] [--prompts 8]
        [--max-tokens 24] [--out F.json]

A small model's round on MLX CUDA is bound by the host's encode (bench/primitive_cost.py: a
cuBLASLt matmul ~16 us of host, the per-row gemv route's three nodes ~6). This wraps every
linear layer's call while an engine decodes (second pass, after a warm one; plain and MTP at
`--depth`) and counts calls by (class, rows, weight shape, routed), where routed means the
per-row route (workers/row_linear.py) took it. Prefill calls (more than ROWS_MAX rows) are
counted apart. Per decode round: calls divided by the pass's decode rounds.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from bench.peers import heldout_prompts


def main() -> None:
    from workers import Engine, SamplingParams, row_linear

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    log: collections.Counter = collections.Counter()
    active = [False]

    def wrap(cls: type) -> None:
        real = cls.__call__

        def call(self, x, _real=real):  # type: ignore[no-untyped-def]
            if active[0]:
                K = x.shape[-1]
                M = x.size // K
                nbytes = self["weight"].nbytes
                routed = (
                    isinstance(self, row_linear.RowLinear)
                    and 1 < M <= row_linear.ROWS_MAX
                    and M * nbytes <= row_linear.ROW_BYTES_MAX
                )
                kind = "prefill" if M > row_linear.ROWS_MAX else "round"
                log[(kind, type(self).__name__, M, tuple(self["weight"].shape), routed)] += 1
            return _real(self, x)

        cls.__call__ = call

    for cls in (nn.Linear, row_linear.ViewLinear, row_linear.RowLinear):
        wrap(cls)
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, temperature=0.0)
    out: dict = {"device": str(mx.default_device()), "model_dir": str(args.model_dir)}
    for drafter in (None, "mtp"):
        engine = Engine.load(
            args.model_dir, drafter=drafter, max_batch_size=args.batch_size,
            draft_depth=args.depth,
        )  # fmt: skip
        engine.generate(prompts, [sp] * len(prompts))  # warm: shapes built, traces made
        engine.take_round_stats()
        log.clear()
        active[0] = True
        engine.generate(prompts, [sp] * len(prompts))
        active[0] = False
        rounds = sum(1 for s in engine.take_round_stats() if not s.num_prefill_tokens)
        rows = [
            {"kind": k, "class": c, "rows": m, "weight": list(w), "routed": r,
             "calls": n, "per_round": round(n / max(rounds, 1), 2)}
            for (k, c, m, w, r), n in log.most_common()
        ]  # fmt: skip
        name = drafter or "plain"
        unrouted = sum(r["per_round"] for r in rows if r["kind"] == "round" and not r["routed"])
        routed = sum(r["per_round"] for r in rows if r["kind"] == "round" and r["routed"])
        out[name] = {"decode_rounds": rounds, "routed_per_round": round(routed, 2),
                     "unrouted_per_round": round(unrouted, 2), "calls": rows}  # fmt: skip
        print(name, f"rounds {rounds}, per round: routed {routed:.1f}, not {unrouted:.1f}")
        for r in rows[:16]:
            print("  ", r)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
