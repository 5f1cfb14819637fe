"""Which linear calls of an engine's rounds take which route, and how many a round makes.

    python -m bench.linear_routes --model-dir DIR [--batch-size 8] [--depth 4] [--prompts 8]
        [--max-tokens 24] [--out F.json]

A small model's round on MLX CUDA is bound by the host's encode, where a cuBLASLt matmul costs
~11-16 us of host and the per-row gemv route's call ~6 (bench/dispatch_cost.py). This wraps the
linear layers' calls while an engine runs a pass (the second, after a warm one; plain, then MTP
at `--depth`) and counts the outermost calls by (rows, weight shape, routed), where routed
means the per-row route (workers/row_linear.py `takes`) ran it. Calls of more than ROWS_MAX
rows are counted as "wide": prefill chunks, and verifies past ROWS_MAX rows (a depth-4 verify
of 16 rows is 80). Per round: calls divided by every round of the pass, prefill rounds too.
Not seen: calls inside a compiled function after its trace (MLX CUDA compiles the MTP head's
steps, workers/compiled_step.py, traced in the warm pass), so there the head's linears are
missing.
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
    inside = [0]  # wrapped calls running: a refused RowLinear call goes on to ViewLinear's

    def wrap(cls: type) -> None:
        real = cls.__call__

        def call(self, x, _real=real):  # type: ignore[no-untyped-def]
            if active[0] and not inside[0]:
                K = x.shape[-1]
                M = x.size // K
                w = self["weight"]
                routed = isinstance(self, row_linear.RowLinear) and row_linear.takes(M, w.nbytes)
                kind = "wide" if M > row_linear.ROWS_MAX else "narrow"
                log[(kind, M, tuple(w.shape), routed)] += 1
            inside[0] += 1
            try:
                return _real(self, x)
            finally:
                inside[0] -= 1

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
        rounds = len(engine.take_round_stats())
        rows = [
            {"kind": k, "rows": m, "weight": list(w), "routed": r,
             "calls": n, "per_round": round(n / max(rounds, 1), 2)}
            for (k, m, w, r), n in log.most_common()
        ]  # fmt: skip
        name = drafter or "plain"
        per = {
            f"{kind}_{'routed' if routed else 'not_routed'}_per_round": round(
                sum(r["per_round"] for r in rows if r["kind"] == kind and r["routed"] == routed), 2
            )
            for kind in ("narrow", "wide")
            for routed in (True, False)
        }
        out[name] = {"rounds": rounds, **per, "calls": rows}
        print(name, f"rounds {rounds}, per round: {per}")
        for r in rows[:16]:
            print("  ", r)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
