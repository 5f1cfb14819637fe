"""Prefill in length groups vs one padded batch, end to end (default model, held-out prompts).

    python -m bench.prefill_groups [--batch-sizes 8,32] [--repeats 3] [--out F]

A prefill batch pads every row to its longest (workers/prefill_job.py `similar_lengths`). On
the CPU padding is compute, so groups win; on a GPU each new prefill shape may cost a graph
build, so more, smaller groups may lose. Jobs of plain and MTP-at-fixed-depth engines, with
grouping on and off (PAD_RATIO huge), interleaved.
"""

from __future__ import annotations

import argparse

import workers.prefill_job as prefill_job
from bench.jobs import job_rate, write_rows
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench/out/prefill_groups.json")
    args = ap.parse_args()
    prompts = heldout_prompts(args.prompts)
    sp = SamplingParams(max_tokens=64)
    grouped = prefill_job.PAD_RATIO
    rows: dict[str, dict[str, list[float]]] = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        engines = {
            "plain": Engine.load(None, max_batch_size=B),
            "mtp_fixed": Engine.load(None, drafter="mtp", max_batch_size=B, draft_depth=3),
        }
        rates: dict[str, list[float]] = {}
        for ratio in (grouped, 1e9):
            prefill_job.PAD_RATIO = ratio
            for e in engines.values():
                e.generate(prompts, sp)  # warm-up: every shape of this setting
        for _ in range(args.repeats):
            for ratio, tag in ((grouped, "grouped"), (1e9, "one_batch")):
                prefill_job.PAD_RATIO = ratio
                for name, e in engines.items():
                    rates.setdefault(f"{name}_{tag}", []).append(job_rate(e, prompts, sp))
        prefill_job.PAD_RATIO = grouped
        rows[str(B)] = rates
        print(B, {k: [round(x) for x in v] for k, v in rates.items()}, flush=True)
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
