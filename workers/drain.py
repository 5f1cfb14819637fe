"""A draining batch: no request waits, so what counts is when the running rows finish.

While requests wait, a finished row's slot is refilled at once and the depth that maximises
the batch's tokens per second is the right one (workers/depth_policy.py). Once none waits
(the end of an offline job, a quiet server), rows leave one by one and the batch's remaining
time is set by its slowest rows: a depth whose rounds cost 1.9x a plain round for 2.55 tokens
per row on average still loses if one row accepts 1.4 (H200, trained hybrid, B=16, 16 prompts:
the batch ran 31 depth-3 rounds at B=16, then 39 more while one slow row drained, 0.75x plain).

The remaining time at depth k, rows leaving as their rounds run out:

    n_r(k) = remaining_r / e_r(k)                      rounds row r still needs
    T(k)   = sum_i cost(B - i, k) * (n_(i) - n_(i-1))   n sorted ascending, n_(-1) = 0

e_r(k) is the row's expected tokens per round: the policy's conditional acceptance per draft
position, scaled by the row's own acceptance over that of the rows the policy learnt from (its
accept count, shrunk to theirs by `prior` draft tokens so a row's first rounds cannot swing
it). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class DrainingRows:
    """The running rows of a batch no request waits to join ([B] each)."""

    remaining: np.ndarray  # tokens each row may still emit (max_tokens, context: an upper bound)
    drafted: np.ndarray  # draft tokens each row has proposed so far
    accepted: np.ndarray  # ... and had accepted

    @classmethod
    def of(cls, rows: object) -> DrainingRows:
        """From rows with `remaining`, `num_draft_tokens`, `num_accepted_tokens` (workers/rows)."""
        table = np.array(
            [(r.remaining, r.num_draft_tokens, r.num_accepted_tokens) for r in rows],  # type: ignore[attr-defined]
            dtype=np.float64,
        ).reshape(-1, 3)
        return cls(table[:, 0], table[:, 1], table[:, 2])


def accept_scale(
    drafted: np.ndarray, accepted: np.ndarray, prior: float, reference: float
) -> np.ndarray:
    """[B] each row's share of its drafts accepted over `reference` (the same share over every
    row the policy's acceptance was learnt from, so a slow row left alone still reads as
    slow), shrunk to 1 by `prior` draft tokens."""
    if reference <= 0:
        return np.ones(len(drafted))
    own = (accepted + prior * reference) / (drafted + prior)
    return own / reference


def rows_expected_tokens(cond_accept: np.ndarray, scale: np.ndarray, depth: int) -> np.ndarray:
    """[B] tokens a round of `depth` drafts emits per row: the bonus plus the accepted run,
    each position's conditional acceptance ([D]) scaled by the row's (`scale` [B])."""
    if depth == 0:
        return np.ones(len(scale))
    p = np.clip(cond_accept[None, :depth] * scale[:, None], 0.0, 0.99)  # [B, depth]
    return 1.0 + np.cumprod(p, axis=1).sum(axis=1)


def drain_seconds(rounds_left: np.ndarray, cost_by_size: np.ndarray) -> float:
    """Seconds until every row has finished, each round costing what a round of the rows still
    running costs (`cost_by_size` [B + 1]: one round of b rows at index b)."""
    n = np.sort(rounds_left)
    steps = np.diff(n, prepend=0.0)  # [B] rounds run by the (B - i) rows left
    sizes = len(n) - np.arange(len(n))
    return float((cost_by_size[sizes] * steps).sum())
