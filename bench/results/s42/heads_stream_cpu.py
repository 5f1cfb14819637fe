"""Stop 42: the single stream with the shipped head against another head (HEAD_DIR).

    PYTHONPATH=. python bench/results/s42/heads_stream_cpu.py HEAD_DIR DEPTHS PROMPTS REPS ADAPTIVE

As `workers.stream_speed`: each held-out prompt decoded alone (64 new tokens) by a plain engine
and by MTP engines with each head at each of DEPTHS (ADAPTIVE 1: the most the policy may draft;
0: fixed), in turns, warm, every output checked equal to plain's. Prints the plain time over
each engine's, per pass and over all passes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.turns import host_mtp_engine, in_turns
from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    heads = {"shipped": DEFAULT_MODEL_DIR / "target", "other": Path(sys.argv[1])}
    depths = [int(d) for d in sys.argv[2].split(",")]
    n, reps, adaptive = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    engines = {"plain": plain}
    for h, d in heads.items():
        for k in depths:
            drafter = make_drafter("mtp", d, plain.model)
            engines[f"{h}{k}"] = host_mtp_engine(plain, k, adaptive, drafter=drafter)
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    r = in_turns(engines, [[p] for p in prompts], sp, reps)
    print(json.dumps({"speedup": r["plain_over_engine"], "per_pass": r["passes"]}))


if __name__ == "__main__":
    main()
