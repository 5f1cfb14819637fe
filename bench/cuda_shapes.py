"""Where a short job's time goes on MLX CUDA: rounds, distinct round shapes, depth switches.

    python -m bench.cuda_shapes [--batch-size 32] [--prompts 64]

Fixed depth, then adaptive twice, in one process (each after a warm-up job of its own); per
job: tokens/s, rounds, distinct (rows, drafting) shapes, switches between drafting and plain
rounds, prefill seconds, and the adaptive run's round sequence (D drafting, . plain). On the
H200 rounds' host times were 0.2-0.4 ms while whole jobs varied 2x between engines of one
kind: a short job's wall time is its prefill and the graph builds of its new shapes
(bench/results/cuda_shapes_diag_h200.json).
"""

from __future__ import annotations

import argparse
import json
import time

from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=64)
    args = ap.parse_args()
    prompts, sp, B = heldout_prompts(args.prompts), SamplingParams(max_tokens=64), args.batch_size
    for adaptive in (False, True, True):
        e = Engine.load(None, drafter="mtp", max_batch_size=B, draft_depth=3,
                        adaptive_depth=adaptive)  # fmt: skip
        e.generate(prompts[:B], sp)  # warm-up job
        e.take_round_stats()
        t0 = time.perf_counter()
        tokens = sum(len(o.tokens) for o in e.generate(prompts, sp))
        wall = time.perf_counter() - t0
        st = [s for s in e.take_round_stats() if s.batch_size]
        drafting = [s.num_draft_tokens > 0 for s in st]
        print(json.dumps({
            "adaptive": adaptive,
            "tok_s": round(tokens / wall),
            "rounds": len(st),
            "distinct_shapes": len({(s.batch_size, d) for s, d in zip(st, drafting)}),
            "switches": sum(a != b for a, b in zip(drafting, drafting[1:])),
            "drafting_rounds": sum(drafting),
            "prefill_s": round(sum(s.time_prefill_s for s in st), 3),
            "wall_s": round(wall, 3),
            "seq": "".join("D" if d else "." for d in drafting) if adaptive else None,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
