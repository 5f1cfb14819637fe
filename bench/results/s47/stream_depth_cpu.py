"""Stop 47: the single stream's depth cap once the head steps in C (workers/mtp/host_step.c).

    PYTHONPATH=. python bench/results/s47/stream_depth_cpu.py PROMPTS REPS CAPS [ADAPTIVE]

Each held-out prompt (64 new tokens, EOS honoured) decoded alone by a plain engine and by one
host MTP engine per depth cap in CAPS (e.g. 5,6,7; ADAPTIVE 1, the default: the most the
policy may draft, as the demo's single stream runs; 0: fixed depth), in turns in one process,
warm, every output checked equal to plain's (bench.turns.in_turns). Prints plain's time over
each engine's and each engine's drafting rounds per request.
"""

from __future__ import annotations

import json
import sys

from bench.turns import host_mtp_engine, in_turns
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    caps = [int(c) for c in sys.argv[3].split(",")]
    adaptive = len(sys.argv) <= 4 or sys.argv[4] == "1"
    plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
    engines = {"plain": plain}
    for cap in caps:
        engines[f"cap{cap}"] = host_mtp_engine(plain, cap, adaptive)
    groups = [[p] for p in heldout_prompts(n)]
    result = in_turns(engines, groups, SamplingParams(max_tokens=64), reps)
    print(json.dumps({"prompts": n, "reps": reps, "adaptive": adaptive, **result}))


if __name__ == "__main__":
    main()
