"""The depth policy's measuring moves (workers/depth_policy.py): each batch-size bucket's
warm-up probe, its early stop when no deeper depth can pay, and the budget that bounds later
explorations. Functions of the policy's state; the policy calls them from `choose`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workers.round_costs import expected_tokens

if TYPE_CHECKING:
    from workers.depth_policy import DepthPolicy


def probe(policy: DepthPolicy, batch_size: int) -> int | None:
    """The warm-up of this batch size's bucket (sizes of one bit length: 1, 2-3, 4-7, ...):
    depth 0, 0, 1, 1, 2, 2, ... until no deeper depth can pay, then 0, 0 again; None
    once it is done.

    Per bucket, because what a depth costs depends on B (memory-bound small batches,
    compute-bound large ones) more than a linear fit over other sizes can say. Seen on the
    CPU: rows arriving one by one warmed a global warm-up at B <= 2; at B = 16 plain was
    fitted at 24 ms where it took 18, and depth 3 ran there at 0.7x plain's rate; and the
    other way on a GPU: a batch size that had only a plain round was fitted too dear to
    draft and never tried it.
    """
    bucket = int(batch_size).bit_length()
    if bucket in policy._probed:
        return None
    counts, need = bucket_counts(policy, bucket), max(2, policy.run)
    for k in policy.depths():
        if counts.get(k, 0) < need:
            if k >= 2 and deeper_cannot_pay(policy, bucket):
                break
            return k
    # Plain again, after the drafting depths: the ladder's first rounds pay one-off costs
    # (a fresh process's first buffers, caches filling) that made plain decoding look
    # dearer than it is, and drafting then chosen where it lost (the demo's batch job).
    if counts.get(0, 0) < 2 * need:
        return 0
    policy._probed.add(bucket)
    return None


def bucket_counts(policy: DepthPolicy, bucket: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for (b, k), n in policy._count.items():
        if b.bit_length() == bucket:
            counts[k] = counts.get(k, 0) + n
    return counts


def deeper_cannot_pay(policy: DepthPolicy, bucket: int) -> bool:
    """Neither the deepest measured depth m >= 1 nor any deeper one can beat a shallower
    measured depth in this bucket, even with every draft accepted: a round of depth >= m
    costs at least the fastest round seen at m (first rounds included, per row), and
    emits at most 1 + max_depth tokens per row."""
    per_row: dict[int, float] = {}  # depth -> fastest seconds per row in this bucket
    for (b, j), t in policy._first.items():
        if b.bit_length() == bucket:
            per_row[j] = min(per_row.get(j, float("inf")), t / b)
    m = max(per_row, default=0)
    # Two rounds each: one alone may be a one-off (a GPU building kernels for a new shape).
    if m < 1 or 0 not in per_row or bucket_counts(policy, bucket).get(m, 0) < 2:
        return False
    c = policy.acceptance()
    best = max(expected_tokens(c, j) / max(t, 1e-12) for j, t in per_row.items() if j < m)
    ks = np.arange(m, policy.max_depth + 1)
    if (policy._tried[:m] >= policy.min_evidence).all():
        # Acceptance up to m is measured (a large batch's two rounds): bound depth k >= m by
        # m's tokens plus every further draft accepted, over m's time plus the per-depth
        # cost seen from 0 to m for each further step (a verify's cost grows at least
        # linearly with its width once compute-bound, the case where drafting stops paying).
        reach = np.cumprod(c[:m])
        tokens = 1 + reach.sum() + (ks - m) * reach[-1]
        seconds = per_row[m] + (ks - m) * max(0.0, (per_row[m] - per_row[0]) / m)
    else:  # too few rows seen yet (one row's two rounds): every draft accepted
        tokens, seconds = np.full(len(ks), 1.0 + policy.max_depth), np.full(len(ks), per_row[m])
    return bool((tokens / np.maximum(seconds, 1e-12) <= best).all())


def may_explore(policy: DepthPolicy, batch_size: int, k: int, run: int = 1) -> bool:
    """Explore depth k for `run` rounds only while exploring's cost stays within budget,
    its first round costed at the slowest drafting round seen at this batch size: a
    drafter's first proposal after rounds without drafts may carry one-off work (a draft
    model catching up on the tokens it skipped) that a median would hide."""
    rates = policy._rates(batch_size)
    worst = max(
        (t for (b, j), t in policy._worst.items() if b == batch_size and j > 0), default=0.0
    )
    cost = run * policy.round_costs(batch_size)[k] + (worst if k > 0 else 0.0)
    best = max(rates[policy.depths()].max(), 1e-9)
    loss = max(0.0, cost - run * expected_tokens(policy.acceptance(), k) / best)
    if (batch_size, k) not in policy._seen:
        loss += policy.build_cost()  # a shape never run: its first round builds it
    if k != policy._chosen.get(batch_size, (0, 0))[1]:
        loss += 2 * policy.switch_cost()  # there and back
    if policy._explore_loss + loss > policy.explore_budget * policy._time_total:
        return False
    policy._explore_loss += loss
    return True
