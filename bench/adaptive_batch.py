"""Adaptive depth on a compute-bound batch: MTP (adaptive / fixed depth 1) vs no drafter.

    python -m bench.adaptive_batch [--prompts 32] [--batch-size 16] [--repeats 2] [--out F]

The demo's batch job in one process: the held-out prompts through one engine of `--batch-size`
slots (the demo's per-worker batch), serving defaults (prefix cache on, adaptive depth), each
configuration timed end to end (prefill included) `--repeats` times, alternating, after one
untimed warm-up job each. Each timed job starts with an empty prefix cache: until stop 49 the
jobs after the first hit the prompts cached by the jobs before, skipping most of their
prefill, which drafting cannot speed (mtp_depth1 read 1.13x plain so; with the cache emptied
before each job, 0.96x: bench/results/s49/). On two CPU cores a 16-row verify of 2 tokens per row costs about 1.6
plain rounds, so drafting cannot pay there: the adaptive policy must settle on depth 0 and
cost about what plain decoding costs. Prints and writes JSON (tokens/s, ratio to plain, rounds
and drafted tokens per job).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench/results/adaptive_batch_cpu.json")
    ap.add_argument(
        "--configs", default="plain,mtp_adaptive,mtp_depth1",
        help="also: mtp_adaptive_no_explore (explore_every=0), mtp_held_at_0 (the policy forced "
        "to depth 0: what having the MTP head attached costs)",
    )  # fmt: skip
    args = ap.parse_args()
    prompts = heldout_prompts(args.prompts)
    sp = SamplingParams(max_tokens=args.max_tokens)

    def make(drafter: str | None, **kw: object) -> Engine:
        return Engine.load(
            None, drafter=drafter, max_batch_size=args.batch_size, prefix_cache_tokens=-1, **kw
        )

    def configured(name: str) -> Engine:
        if name == "plain":
            return make(None)
        if name == "mtp_depth1":
            return make("mtp", draft_depth=1)
        engine = make("mtp", draft_depth=3, adaptive_depth=True)
        policy = engine.depth_policy
        assert policy is not None
        if name == "mtp_adaptive_no_explore":
            policy.explore_every = 0
        elif name == "mtp_held_at_0":
            policy.forced = 0
        elif name != "mtp_adaptive":
            raise SystemExit(f"--configs: unknown configuration {name!r}")
        return engine

    engines = {name: configured(name) for name in args.configs.split(",")}
    for e in engines.values():
        e.generate(prompts[: args.batch_size], sp)  # warm-up job (not timed)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, e in engines.items():
            e.take_round_stats()
            e.prefix_cache.clear()  # the demo's workers meet each prompt once: no hits
            t0 = time.perf_counter()
            outs = e.generate(prompts, sp)
            dt = time.perf_counter() - t0
            stats = e.take_round_stats()
            runs[name].append({
                "seconds": round(dt, 3),
                "tokens_per_s": round(sum(len(o.tokens) for o in outs) / dt, 1),
                "prefill_s": round(sum(s.time_prefill_s for s in stats), 3),
                "rounds": sum(1 for s in stats if s.batch_size),
                "drafted_tokens": sum(s.num_draft_tokens for s in stats),
            })  # fmt: skip
    plain = [r["seconds"] for r in runs["plain"]]
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {os.environ.get('LD_PRELOAD', 'no BLAS preload')}",
        "command": f"python -m bench.adaptive_batch --prompts {args.prompts} --batch-size "
        f"{args.batch_size} --repeats {args.repeats} --configs {args.configs}",
        "runs": runs,
        "speed_vs_plain": {
            name: [round(p / r["seconds"], 3) for p, r in zip(plain, rs)]
            for name, rs in runs.items()
            if name != "plain"
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["speed_vs_plain"]))
    for name, ratios in result["speed_vs_plain"].items():
        print(f"{name}: median {statistics.median(ratios):.3f} ÷ plain over {len(ratios)} pairs")


if __name__ == "__main__":
    main()
