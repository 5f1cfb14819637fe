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

from bench.turns import ab_main, patched
from workers.mtp.host_head import HostLinear


def main() -> None:
    as_before = lambda self, x: x @ self.io  # noqa: E731  # every product as x @ w_io
    ab_main({"new": contextlib.nullcontext,
             "old": lambda: patched(HostLinear, "__call__", as_before)})  # fmt: skip


if __name__ == "__main__":
    main()
