"""Stop 45: one worker's share of the demo's batch job, in one process, MTP against plain.

    PYTHONPATH=. python bench/results/s45/job_cpu.py B PROMPTS REPS

PROMPTS held-out prompts (64 new tokens, EOS honoured) handed to an engine at once, at most
B running (as a worker of `./run demo` gets 32 requests with --max-batch-size 16): a plain
engine and an adaptive MTP engine up to depth 3 (`Engine.load` as a worker builds them, warm),
in turns, REPS times, every output checked equal to plain's. Prints plain's time over MTP's
per rep, and for each engine the steps in which a prefill ran (`bench/step_log.py`) and the
others (rounds only): their count and seconds, and MTP's drafting rounds.
"""

from __future__ import annotations

import collections
import json
import sys
import time

from bench.step_log import log_steps
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    B, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    engines = {
        "plain": Engine.load(None, drafter=None, max_batch_size=B, warm_up=True),
        "mtp": Engine.load(
            None, drafter="mtp", max_batch_size=B, draft_depth=3, adaptive_depth=True, warm_up=True
        ),  # fmt: skip
    }
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    for e in engines.values():
        e.generate(prompts[:B], sp)
        e.take_round_stats()
    logs = {k: log_steps(e) for k, e in engines.items()}
    wall: dict[str, list[float]] = collections.defaultdict(list)
    drafting = 0
    for _ in range(reps):
        ref = None
        for name, e in engines.items():
            t0 = time.perf_counter()
            out = [list(o.tokens) for o in e.generate(prompts, sp)]
            wall[name].append(time.perf_counter() - t0)
            drafting += sum(s.draft_depth > 0 for s in e.take_round_stats())
            ref = out if ref is None else ref
            assert out == ref, name
    steps = {}
    for name, log in logs.items():
        pre = [s.seconds for s in log if s.prefilled]
        rest = [s.seconds for s in log if not s.prefilled]
        steps[name] = {"prefill_steps": len(pre), "prefill_steps_s": round(sum(pre), 3),
                       "rounds": len(rest), "rounds_s": round(sum(rest), 3)}  # fmt: skip
    ratios = [round(p / m, 3) for p, m in zip(wall["plain"], wall["mtp"])]
    print(
        json.dumps(
            {
                "batch_size": B,
                "prompts": n,
                "reps": reps,
                "plain_over_mtp": ratios,
                "plain_over_mtp_all": round(sum(wall["plain"]) / sum(wall["mtp"]), 3),
                "steps": steps,
                "mtp_drafting_rounds": drafting,
            }
        )
    )


if __name__ == "__main__":
    main()
