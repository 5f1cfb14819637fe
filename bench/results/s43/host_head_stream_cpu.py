"""Stop 43: the MTP head's steps in MLX against NumPy on the host, decoding one or more streams.

    PYTHONPATH=. python bench/results/s43/host_head_stream_cpu.py DEPTHS PROMPTS REPS ADAPTIVE [B]

Each held-out prompt (64 new tokens) decoded by a plain engine and by MTP engines with the
head's steps in MLX (`mlx`, workers/drafters/mtp.py) and on the host (`host`,
workers/drafters/mtp_host.py) at each of DEPTHS (ADAPTIVE 1: the most the policy may draft;
0: fixed), in turns, warm (warm_up=True, as a serving worker starts), every output checked
equal to plain's. B (default 1): the batch size; B > 1 decodes the prompts B at a time.
Prints plain's time over each engine's, per pass and over all passes.
"""

from __future__ import annotations

import json
import sys

from bench.turns import default_head, host_mtp_engine, in_turns
from workers.drafters.mtp import MTPDrafter
from workers.drafters.mtp_host import HostMTPDrafter
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    depths = [int(d) for d in sys.argv[1].split(",")]
    n, reps, adaptive = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    B = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    engines = {"plain": plain}
    for name, kind in (("mlx", MTPDrafter), ("host", HostMTPDrafter)):
        for k in depths:
            drafter = kind(plain.model, default_head())
            engines[f"{name}{k}"] = host_mtp_engine(plain, k, adaptive, drafter=drafter)
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    groups = [prompts[i : i + B] for i in range(0, n, B)]
    r = in_turns(engines, groups, sp, reps)
    print(json.dumps({"batch_size": B, "adaptive": adaptive, "speedup": r["plain_over_engine"],
                      "per_pass": r["passes"]}))  # fmt: skip


if __name__ == "__main__":
    main()
