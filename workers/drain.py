"""The end of a job in sight: when the rows finish is what counts, not tokens per second.

While requests keep arriving, or many wait, a finished row's slot is refilled at once and the
depth that maximises the batch's tokens per second is the right one (workers/depth_policy.py).
Near the end of a job (no request arrived for QUIET_STEPS steps and at most JOB_TAIL_ROWS wait
per running row: an offline batch, a server whose traffic stopped) the batch drains: rows
leave one by one and the remaining time is set by the slowest ones. A depth whose rounds cost 1.9x a plain round for
2.55 tokens per row on average still loses if one row accepts 1.4 (H200, trained hybrid, B=16,
16 prompts: 31 depth-3 rounds at B=16, then 39 more while one slow row drained, 0.75x plain).

The remaining time at depth k, each waiting row taking the first slot to free (FIFO):

    n_r(k)   = remaining_r / e_r(k)                       rounds row r still needs
    end_s    = the round slot s's last row finishes       (running rows, then joiners)
    T(k)     = sum_i cost(B - i, k) * (end_(i) - end_(i-1))   slot ends ascending

(a round of b rows costs cost(b, k)). e_r(k) is the row's expected tokens per round: the
policy's conditional acceptance per draft position, scaled by the row's own acceptance over
that of the rows the policy learnt from. A row's own evidence is shrunk by `prior` draft
tokens to what is expected of a row before any: the spread of acceptance among finished rows
(their quantiles, `population_scales`), so a batch of new rows is expected to hold slow ones
as the traffic does. (Expected as average rows, 16 prompts at B=8 drafted through both waves
and the last, slow joiners drained alone: 0.68x plain on the H200.) Pure numpy; `job_depth`
weighs what the depth policy hands it (`JobCosts`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

# Waiting rows per running row up to which the job's end is weighed (beyond, the batch stays
# full for many rounds and tokens per second decide; the schedule costs O(W log B) a choice).
JOB_TAIL_ROWS = 8
# Steps without a request arriving before the work at hand is taken as all there is: a live
# server's steady traffic refills slots (tokens per second decide there); an offline job, or a
# server whose traffic stopped, drains. Few: a job's rows that drafted before the view came
# cannot be undrafted (32 steps: every 16-prompt job on the H200 drafted 29 depth-3 rounds
# at B=16 before it, and its slowest rows then drained plainly, 0.61-0.66x plain).
QUIET_STEPS = 8
MIN_POPULATION = 4  # finished rows before their spread of acceptance is used


@dataclass
class DrainingRows:
    """The running rows ([B] each) and the rows still to join them ([W], in order)."""

    remaining: np.ndarray  # tokens each row may still emit (max_tokens, context: an upper bound)
    drafted: np.ndarray  # draft tokens each row has proposed so far
    accepted: np.ndarray  # ... and had accepted
    waiting: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [W] their remaining
    free_slots: int = 0  # slots no row holds: the first waiting rows take them at once

    @classmethod
    def of(
        cls, rows: Iterable[Any], waiting: Iterable[Any] = (), free_slots: int = 0
    ) -> DrainingRows:
        """From rows with `remaining`, `num_draft_tokens`, `num_accepted_tokens` (workers/rows)."""
        table = np.array(
            [(r.remaining, r.num_draft_tokens, r.num_accepted_tokens) for r in rows],
            dtype=np.float64,
        ).reshape(-1, 3)
        queued = np.array([r.remaining for r in waiting], dtype=np.float64)
        return cls(table[:, 0], table[:, 1], table[:, 2], queued, free_slots)


def accept_scale(
    drafted: np.ndarray,
    accepted: np.ndarray,
    prior: float,
    reference: float,
    base: np.ndarray | float = 1.0,
) -> np.ndarray:
    """[B] each row's share of its drafts accepted over `reference` (the same share over every
    row the policy's acceptance was learnt from, so a slow row left alone still reads as
    slow), shrunk to `base` ([B] or one: what is expected of a row before its own evidence)
    by `prior` draft tokens."""
    if reference <= 0:
        return np.ones(len(drafted))
    own = (accepted + prior * reference * base) / (drafted + prior)
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


def slot_ends(
    rounds_left: np.ndarray, waiting_rounds: np.ndarray, free_slots: int = 0
) -> np.ndarray:
    """Each slot's last round ([B + free_slots], ascending) when every waiting row ([W]
    rounds each, in order) takes the first slot to free (a free one at once)."""
    ends = [float(x) for x in rounds_left] + [0.0] * free_slots
    heapq.heapify(ends)
    for n in waiting_rounds:
        heapq.heappush(ends, heapq.heappop(ends) + float(n))
    return np.array(sorted(ends))


def job_seconds(
    rounds_left: np.ndarray,
    waiting_rounds: np.ndarray,
    cost_by_size: np.ndarray,
    free_slots: int = 0,
) -> float:
    """Seconds until the running rows ([B] rounds left) and the waiting ones ([W]) have all
    finished, a round of b rows costing cost_by_size[b] ([B + free_slots + 1]); a slot
    never taken runs no rounds."""
    return drain_seconds(slot_ends(rounds_left, waiting_rounds, free_slots), cost_by_size)


def population_scales(rates: np.ndarray, reference: float, n: int) -> np.ndarray:
    """[n] acceptance scales for n rows with no evidence of their own: the quantiles of the
    finished rows' (`rates`, accepted over drafted, over `reference`) at (i + 0.5) / n,
    spread over the rows (not sorted: a queue's slowest row is not assumed to join last).
    Ones with fewer than MIN_POPULATION rates."""
    if len(rates) < MIN_POPULATION or reference <= 0:
        return np.ones(n)
    levels = (np.arange(n) + 0.5) / n
    spread = np.argsort((np.arange(n) * 0.6180339887) % 1.0)  # a fixed interleave
    return np.quantile(rates / reference, levels)[spread]


class JobCosts(NamedTuple):
    """What the depth policy knows that a job's-end choice weighs (built by the policy's
    `_drain_choice`, D = max_depth)."""

    costs: (
        np.ndarray
    )  # [slots + 1, D + 1] seconds a round of b rows costs at depth k (row 0 unused)
    acceptance: np.ndarray  # [D] conditional acceptance per draft position
    reference: float  # accepted over drafted draft tokens, every row the policy learnt from
    row_rates: np.ndarray  # finished rows' accepted over drafted (their spread)
    prior: float  # draft tokens a row's own evidence is shrunk by
    once: np.ndarray  # [D + 1] seconds taking depth k costs once (a build, switches)
    margin: np.ndarray  # [D + 1] the gain over depth 0 that drafting at depth k must clear
    depths: list[int]  # the depths to choose from
    current: int = 0  # the depth held now: kept while no slower than plain (`job_depth`)


def row_scales(drain: DrainingRows, job: JobCosts) -> tuple[np.ndarray, np.ndarray]:
    """([B] the running rows' acceptance scales, each shrunk to its expected one, [W] the
    waiting rows' expected ones: `population_scales`)."""
    B = len(drain.remaining)
    base = population_scales(job.row_rates, job.reference, B + len(drain.waiting))
    scale = accept_scale(drain.drafted, drain.accepted, job.prior, job.reference, base[:B])
    return scale, base[B:]


def job_seconds_by_depth(drain: DrainingRows, job: JobCosts) -> dict[int, float]:
    """Seconds until the running and waiting rows have all finished at each depth (`job_seconds`,
    each row at its own acceptance), plus what taking the depth costs once."""
    c = job.acceptance
    scale, queued_scale = row_scales(drain, job)
    seconds = {}
    for k in job.depths:
        rounds = drain.remaining / rows_expected_tokens(c, scale, k)
        queued = drain.waiting / rows_expected_tokens(c, queued_scale, k)
        seconds[k] = job_seconds(rounds, queued, job.costs[:, k], drain.free_slots)
        seconds[k] += job.once[k]
    return seconds


def job_depth(drain: DrainingRows, job: JobCosts) -> int:
    """The depth that finishes the job's rows soonest (`job_seconds_by_depth`); drafting must
    still clear its margin to start, and a depth held already (`job.current`) is kept while
    predicted no slower than plain (its switches charged: the job's end is the horizon they
    are paid over; workers/depth_policy.py `hold_depth`)."""
    seconds = job_seconds_by_depth(drain, job)
    best = min(seconds, key=lambda j: seconds[j])
    if seconds[best] * (1 + job.margin[best]) > seconds[0]:
        held = job.current
        return held if held > 0 and held in seconds and seconds[held] <= seconds[0] else 0
    return best
