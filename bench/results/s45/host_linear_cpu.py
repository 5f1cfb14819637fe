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

import collections
import contextlib
import json
import sys
import time
from collections.abc import Iterator

from workers.drafters.mtp_host import HostMTPDrafter
from workers.engine import Engine
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
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    head = Engine.load(None, drafter="mtp", max_batch_size=1).drafter.head  # type: ignore[union-attr]
    engines = {"plain": plain}
    for name in ("new", "old"):
        with products_as_before() if name == "old" else contextlib.nullcontext():
            engines[name] = Engine(plain.model, plain.tokenizer,
                                   drafter=HostMTPDrafter(plain.model, head), max_batch_size=B,
                                   draft_depth=depth, adaptive_depth=adaptive,
                                   warm_up=True)  # fmt: skip
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    groups = [prompts[i : i + B] for i in range(0, n, B)]
    for name, e in engines.items():
        with products_as_before() if name == "old" else contextlib.nullcontext():
            e.generate(groups[0], sp)
            e.take_round_stats()
    wall: dict[str, float] = collections.defaultdict(float)
    drafting: dict[str, int] = collections.defaultdict(int)
    passes = []
    for _ in range(reps):
        this: dict[str, float] = collections.defaultdict(float)
        for i, group in enumerate(groups):
            ref = None
            for name, e in engines.items():
                with products_as_before() if name == "old" else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    out = [list(o.tokens) for o in e.generate(group, sp)]
                    dt = time.perf_counter() - t0
                wall[name] += dt
                this[name] += dt
                drafting[name] += sum(s.draft_depth > 0 for s in e.take_round_stats())
                ref = out if name == "plain" else ref
                assert out == ref, (name, i)
        passes.append({k: round(this["plain"] / v, 3) for k, v in this.items() if k != "plain"})
    total = {k: round(wall["plain"] / v, 3) for k, v in wall.items() if k != "plain"}
    runs = reps * n
    print(
        json.dumps(
            {
                "depth": depth,
                "adaptive": adaptive,
                "batch_size": B,
                "prompts": n,
                "reps": reps,
                "plain_over_engine": total,
                "passes": passes,
                "drafting_rounds_per_request": {k: round(v / runs, 2) for k, v in drafting.items()},
                "plain_tokens_per_s_note": "ratios only: this VM's absolute rates drift",
            }
        )
    )


if __name__ == "__main__":
    main()
