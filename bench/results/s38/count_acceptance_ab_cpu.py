"""The depth policy's acceptance count in numpy (before) against plain Python (after, c5ffb87, reverted), in turns
in one process on the CPU (stop 38).

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. \
        python bench/results/s38/count_acceptance_ab_cpu.py [--pairs 10]

Adaptive MTP engines on the default model (greedy, 64 tokens +-50%, held-out prompts), one
with `RoundLog._count_acceptance` as it was (numpy broadcasting over [B, D]), one as it is;
run at c5ffb87 (after: the engine's own count); per pair a pass of each; tokens/s and `observe`'s median host time per round, at B = 1 and 16.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import types
from pathlib import Path

import numpy as np

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine

MODEL = Path("workers/default_model/target")


def numpy_count(self, draft_counts, num_accepted, k):  # type: ignore[no-untyped-def]
    """The count before stop 38 (workers/round_log.py at 61eb683)."""
    if k == 0:
        self._tried *= self.decay
        self._hit *= self.decay
        self._drafted *= self.decay
        self._accepted *= self.decay
        return
    j = np.arange(self.max_depth)[None, :]
    counts = np.minimum(draft_counts, self.max_depth)[:, None]
    acc = num_accepted[:, None]
    self._tried = self._tried * self.decay + ((j < counts) & (j <= acc)).sum(0)
    self._hit = self._hit * self.decay + (j < acc).sum(0)
    self._drafted = self._drafted * self.decay + float(draft_counts.sum())
    self._accepted = self._accepted * self.decay + float(num_accepted.sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = {}
    for B, n in ((1, 8), (16, 32)):
        prompts = heldout_prompts(MODEL, n)
        sp = spread_params(n, 64, 0.5)
        engines, observed = {}, {}
        for side in ("before", "after"):
            e = Engine.load(MODEL, drafter="mtp", max_batch_size=B, draft_depth=3,
                            adaptive_depth=True, warm_up=True)  # fmt: skip
            policy = e.depth_policy
            assert policy is not None
            if side == "before":
                policy._count_acceptance = types.MethodType(numpy_count, policy)  # type: ignore[method-assign]
            observe, seen = policy.observe, observed.setdefault(side, [])

            def timed(*a, _observe=observe, _seen=seen):  # type: ignore[no-untyped-def]
                t0 = time.perf_counter()
                _observe(*a)
                _seen.append(time.perf_counter() - t0)

            policy.observe = timed  # type: ignore[method-assign]
            e.generate(prompts, sp)  # warm
            seen.clear()
            engines[side] = e
        tps: dict[str, list[float]] = {s: [] for s in engines}
        for _ in range(args.pairs):
            for side, e in engines.items():
                t0 = time.perf_counter()
                outs = e.generate(prompts, sp)
                tps[side].append(sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0))
        ratios = [a / b for a, b in zip(tps["after"], tps["before"])]
        res[f"B={B}"] = {
            "after_over_before_median": round(statistics.median(ratios), 3),
            "pairs": [round(r, 3) for r in ratios],
            "observe_median_us": {
                s: round(float(np.median(v)) * 1e6, 1) for s, v in observed.items()
            },
        }
        print(f"B={B}: {res[f'B={B}']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
