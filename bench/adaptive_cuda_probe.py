"""Adaptive vs fixed depth on a GPU, with exploration on and off (MTP head, default model).

    python -m bench.adaptive_cuda_probe [--batch-sizes 8,32] [--repeats 2] [--out F]

On MLX's CUDA backend a round whose shape differs from the last one costs a graph build
(~15-30 ms on an H200), so every switch of depth is paid: this measures what the depth
policy's exploration rounds cost there, interleaved so that host noise hits every variant.
`held_at_depth_0` keeps the MTP head but never drafts: what MTP's bookkeeping alone costs.
"""

from __future__ import annotations

import argparse

from bench.jobs import job_rate, write_rows
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench/out/adaptive_cuda_probe.json")
    args = ap.parse_args()
    prompts = heldout_prompts(args.prompts)
    sp = SamplingParams(max_tokens=64)
    rows: dict[str, dict[str, list[float]]] = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:

        def make(
            adaptive: bool, explore: bool = True, plain_only: bool = False, B: int = B
        ) -> Engine:
            e = Engine.load(None, drafter="mtp", max_batch_size=B, draft_depth=3,
                            adaptive_depth=adaptive)  # fmt: skip
            if e.depth_policy is not None and not explore:
                e.depth_policy.explore_every = 0
            if e.depth_policy is not None and plain_only:  # the head kept, never drafting
                e.depth_policy.choose = lambda batch_size: 0  # type: ignore[method-assign]
            return e

        engines = {
            "plain": Engine.load(None, max_batch_size=B),
            "fixed": make(False),
            "adaptive": make(True),
            "adaptive_no_explore": make(True, False),
            "held_at_depth_0": make(True, plain_only=True),
        }
        for e in engines.values():
            e.generate(prompts, sp)  # warm-up: graphs of every shape, the policy's buckets
        rates: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(args.repeats):
            for name, e in engines.items():
                rates[name].append(job_rate(e, prompts, sp))
        rows[str(B)] = rates
        print(B, {k: [round(x) for x in v] for k, v in rates.items()}, flush=True)
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
