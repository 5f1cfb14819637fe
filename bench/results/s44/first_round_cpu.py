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

import contextlib
from collections.abc import Iterator

import workers.drafters.mtp as mtp_module
from bench.turns import ab_main


@contextlib.contextmanager
def waits_for_a_verify() -> Iterator[None]:
    """The drafter as before this stop: no pair held, so joiners start not ready."""
    real = mtp_module.hold_last_pairs
    mtp_module.hold_last_pairs = lambda hidden, nexts: None  # type: ignore[assignment]
    try:
        yield
    finally:
        mtp_module.hold_last_pairs = real


def main() -> None:
    ab_main({"held": contextlib.nullcontext, "waits": waits_for_a_verify})


if __name__ == "__main__":
    main()
