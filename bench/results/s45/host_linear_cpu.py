"""Stop 45: the host head's products by row count (workers/mtp/host_head.py `HostLinear`).

    PYTHONPATH=. python bench/results/s45/host_linear_cpu.py DEPTH PROMPTS REPS ADAPTIVE [B]

Each held-out prompt (64 new tokens, EOS honoured) decoded by a plain engine and by two MTP
engines (the head on the host, as `Engine.load` picks on the CPU) at draft depth DEPTH
(ADAPTIVE 1: the most the policy may draft; 0: fixed), in turns, warm (warm_up=True), every
output checked equal to plain's:
- `new`: this stop's head, whose products pick a 2-D GEMM or the weight on the left by rows;
- `old`: the same drafter with `HostLinear.__call__` patched to `x @ w_io` while it runs,
  which is every product as the head made it before this stop (a 3-D [B, 1, in] input as B
  gemvs, the [B, H] logits as a GEMM that packs the lm_head).
B (default 1) decodes the prompts B at a time. Prints plain's time over each engine's, per
pass and over all passes, and each engine's drafting rounds per request.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

from bench.turns import host_mtp_engines, in_turns
from workers.mtp.host_head import HostLinear
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


@contextlib.contextmanager
def products_as_before() -> Iterator[None]:
    real = HostLinear.__call__
    HostLinear.__call__ = lambda self, x: x @ self.io  # type: ignore[method-assign]
    try:
        yield
    finally:
        HostLinear.__call__ = real  # type: ignore[method-assign]


def main() -> None:
    depth, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    adaptive = sys.argv[4] == "1"
    B = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    contexts = {"new": contextlib.nullcontext, "old": products_as_before}
    engines = host_mtp_engines(B, depth, adaptive, contexts)
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    groups = [prompts[i : i + B] for i in range(0, n, B)]
    result = in_turns(engines, groups, sp, reps, {"old": products_as_before})
    settings = {"depth": depth, "adaptive": adaptive, "batch_size": B, "prompts": n, "reps": reps}
    print(json.dumps({**settings, **result}))


if __name__ == "__main__":
    main()
