"""Stop 44: a joining row drafts from its first round (its last prompt pair held for it).

    PYTHONPATH=. python bench/results/s44/first_round_cpu.py DEPTH PROMPTS REPS ADAPTIVE [B]

Each held-out prompt (64 new tokens, EOS honoured) decoded by a plain engine and by two MTP
engines (the head on the host, as `Engine.load` picks on the CPU) at draft depth DEPTH
(ADAPTIVE 1: the most the policy may draft; 0: fixed), in turns, warm (warm_up=True), every
output checked equal to plain's:
- `held`: this stop's drafter, whose joiners draft from their first round;
- `waits`: the same drafter with `hold_last_pairs` patched out while it runs, which is the
  drafter before this stop: the last prompt pair goes into the head's cache with the others,
  and the row drafts only after its first verify (a plain first round).
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

import workers.drafters.mtp as mtp_module
import workers.drafters.mtp_host as mtp_host_module
from workers.drafters.mtp_host import HostMTPDrafter
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


@contextlib.contextmanager
def waits_for_a_verify() -> Iterator[None]:
    """The drafter as before this stop: no pair held, so joiners start not ready."""
    real = mtp_module.hold_last_pairs
    for module in (mtp_module, mtp_host_module):
        module.hold_last_pairs = lambda new, hidden, nexts: None  # type: ignore[assignment]
    try:
        yield
    finally:
        for module in (mtp_module, mtp_host_module):
            module.hold_last_pairs = real  # type: ignore[assignment]


def main() -> None:
    depth, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    adaptive = sys.argv[4] == "1"
    B = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    head = Engine.load(None, drafter="mtp", max_batch_size=1).drafter.head  # type: ignore[union-attr]
    engines = {"plain": plain}
    for name in ("held", "waits"):
        with waits_for_a_verify() if name == "waits" else contextlib.nullcontext():
            engines[name] = Engine(plain.model, plain.tokenizer,
                                   drafter=HostMTPDrafter(plain.model, head), max_batch_size=B,
                                   draft_depth=depth, adaptive_depth=adaptive,
                                   warm_up=True)  # fmt: skip
    sp, prompts = SamplingParams(max_tokens=64), heldout_prompts(n)
    groups = [prompts[i : i + B] for i in range(0, n, B)]
    for name, e in engines.items():
        with waits_for_a_verify() if name == "waits" else contextlib.nullcontext():
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
                with waits_for_a_verify() if name == "waits" else contextlib.nullcontext():
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
