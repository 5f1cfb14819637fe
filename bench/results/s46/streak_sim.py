"""Stop 46: tokens per ms of depth rules replayed over accept_streaks_8.json (offline, approximate).

    python bench/results/s46/streak_sim.py

Each recorded round (fixed depth 8) accepted a8 drafts; a rule choosing depth k accepts
min(a8, k) and costs the B = 1 round model of round_anatomy_cpu.txt: a plain step (6.06 ms),
0.42 ms a verified token, and the head's absorb (1.23 ms) plus 0.365 ms a chained draft.
Approximate: with another depth the rounds would fall at other positions.
"""

import json
from pathlib import Path

SEQS = json.loads(Path(__file__).with_name("accept_streaks_8.json").read_text())


def cost(k: int) -> float:
    return 6.06 + 0.42 * k + (1.23 + 0.365 * (k - 1) if k else 0)


def rate(hi: int, lo: int) -> float:
    """Tokens per ms drafting `hi` after a round that accepted all its drafts, else `lo`."""
    tokens = ms = 0.0
    for seq in SEQS:
        full = False
        for a8 in seq:
            k = hi if full else lo
            a = min(a8, k)
            tokens, ms = tokens + a + 1, ms + cost(k)
            full = a == k
    return tokens / ms


base = rate(5, 5)
for hi, lo in [(4, 4), (6, 6), (8, 8), (5, 4), (6, 4), (8, 3), (8, 4), (8, 5), (7, 4)]:
    print(
        f"hi {hi} lo {lo}: {rate(hi, lo):.4f} tokens/ms, {rate(hi, lo) / base:.3f} x fixed depth 5"
    )
