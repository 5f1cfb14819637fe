"""Adaptive draft depth: draft as deep as pays, measured on this machine, this model, this batch.

Speculation trades extra verify width (and draft steps) for fewer rounds. Whether that pays
depends on where the target forward sits: memory-bound (a big model on a GPU, small batches:
a 5-token verify costs about a 1-token decode) or compute-bound (a CPU, or large batches: the
verify costs nearly 5x). A fixed depth is right for one of them and slower than no drafter in
the other. This policy picks, before every round, the depth k that maximises expected tokens
per second for the running batch of B rows:

    rate(k) = B * (1 + sum_{i=1..k} prod_{j<=i} c_j) / time(B, k)

c_j is the acceptance at draft position j given that position j-1 was accepted. time(B, k) is
the engine step's measured wall time (prefill excluded) at that batch size and depth: the
median of the recent rounds of that (B, k) (the first round of every shape is dropped: it pays
one-time costs such as a GPU backend building kernels for the new shape, ~40 ms each on MLX
CUDA), else a least-squares fit over those per-shape medians on [1, B, k > 0, k, B*k] (verify width k+1 on B rows; a drafter's fixed cost per round, e.g. an
MTP head folding in the last verify's hidden states, and its cost per step). Whole-step time,
not per-phase time: what a depth costs includes its bookkeeping, which a per-phase model
misattributes. The first rounds and every `explore_every`-th round try the depths in turn, so
every depth stays measured and a bad early estimate cannot lock the choice in; a depth below
the configured one is taken only for a predicted gain above `min_gain`.
Pure numpy: the engine feeds it and obeys it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from workers.types import MAX_DRAFT_DEPTH as MAX_DEPTH

if TYPE_CHECKING:
    from workers.rows import Row


def expected_tokens(cond_accept: np.ndarray, depth: int) -> float:
    """Tokens one row emits with `depth` drafts: the bonus token plus the accepted run."""
    return 1.0 + float(np.cumprod(cond_accept[:depth]).sum())


def fit_linear(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares coefficients of y ~ features @ coef ([N, F] -> [F]); zeros without data."""
    if len(y) == 0:
        return np.zeros(features.shape[1])
    coef, *_ = np.linalg.lstsq(features, y, rcond=None)
    return np.asarray(coef)


@dataclass
class DepthPolicy:
    max_depth: int
    window: int = 256  # rounds kept for the time estimates
    explore_every: int = 16  # every n-th round drafts an exploration depth
    decay: float = 0.995  # per-round forgetting of acceptance counts
    refresh_every: int = 8  # rounds a choice is reused for the same B (a fit costs ~0.3 ms)
    min_gain: float = 0.05  # leave max_depth only for a predicted gain above this
    _rows: deque = field(default_factory=deque)  # (B, k, seconds)
    _seen: set = field(default_factory=set)  # (B, k) shapes whose first round was dropped
    _chosen: dict = field(default_factory=dict)  # B -> (round chosen at, depth)
    _tried: np.ndarray = field(init=False)  # [max_depth] decayed rows that reached position j
    _hit: np.ndarray = field(init=False)  # [max_depth] decayed rows accepted at position j
    _rounds: int = 0

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"DepthPolicy.max_depth={self.max_depth} is invalid: use >= 1")
        self._tried = np.zeros(self.max_depth)
        self._hit = np.zeros(self.max_depth)

    # -- measurements ---------------------------------------------------------------------------
    def observe(
        self,
        draft_counts: np.ndarray,  # [B] drafts each row proposed this round
        num_accepted: np.ndarray,  # [B] drafts each row had accepted
        step_time_s: float,  # the engine step's wall time, prefill excluded
    ) -> None:
        B = len(draft_counts)
        if B == 0:
            return
        self._rounds += 1
        k = int(draft_counts.max(initial=0))
        if (B, k) in self._seen:
            self._rows.append((B, k, step_time_s))
        else:  # a shape's first round pays one-time costs (kernel builds, cache growth)
            self._seen.add((B, k))
        while len(self._rows) > self.window:
            self._rows.popleft()
        # Position j was tried by rows that drafted more than j tokens and had the j before it
        # accepted; it was accepted by rows whose run reached past it.
        j = np.arange(self.max_depth)[None, :]  # [1, D]
        counts = np.minimum(draft_counts, self.max_depth)[:, None]  # [B, 1]
        acc = num_accepted[:, None]  # [B, 1]
        self._tried = self._tried * self.decay + ((j < counts) & (j <= acc)).sum(0)
        self._hit = self._hit * self.decay + (j < acc).sum(0)

    def acceptance(self) -> np.ndarray:
        """[max_depth] conditional acceptance per draft position (0.5 before any evidence)."""
        out = np.empty(self.max_depth)
        prev = 0.5
        for j in range(self.max_depth):
            prev = self._hit[j] / self._tried[j] if self._tried[j] >= 1 else prev
            out[j] = prev
        return out

    # -- the choice -------------------------------------------------------------------------------
    def round_costs(self, batch_size: int) -> np.ndarray:
        """[max_depth + 1] predicted seconds of one engine step of `batch_size` rows per depth.

        A shape measured at least once (its first round aside) costs its median; the others
        come from one least-squares fit over those medians, made once for all depths.
        """
        cells = self._cell_medians()  # {(B, k): median seconds}: robust to one-off spikes
        depths = np.arange(self.max_depth + 1, dtype=np.float64)
        if not cells:
            return np.zeros(len(depths))
        keys = np.array(list(cells), dtype=np.float64)  # [C, 2]
        coef = fit_linear(_features(keys[:, 0], keys[:, 1]), np.array(list(cells.values())))
        fitted = np.maximum(0.0, _features(np.full_like(depths, batch_size), depths) @ coef)
        return np.array([cells.get((batch_size, k), fitted[k]) for k in range(self.max_depth + 1)])

    def _cell_medians(self) -> dict[tuple[int, int], float]:
        by_cell: dict[tuple[int, int], list[float]] = {}
        for B, k, t in self._rows:
            by_cell.setdefault((B, k), []).append(t)
        return {cell: float(np.median(ts)) for cell, ts in by_cell.items()}

    def choose(self, batch_size: int) -> int:
        """The depth cap for the next round of `batch_size` rows."""
        D = self.max_depth
        if self._rounds < 2 * (D + 1):  # warm-up: every depth twice, deepest first
            return D - self._rounds % (D + 1)
        if self.explore_every and self._rounds % self.explore_every == self.explore_every - 1:
            return (self._rounds // self.explore_every) % (D + 1)
        at, depth = self._chosen.get(batch_size, (-self.refresh_every, 0))
        if self._rounds - at < self.refresh_every:
            return depth
        c = self.acceptance()
        costs = self.round_costs(batch_size)
        rates = [expected_tokens(c, k) / max(costs[k], 1e-9) for k in range(D + 1)]
        best = int(np.argmax(rates))
        if rates[best] < (1 + self.min_gain) * rates[D]:
            best = D  # not worth leaving the configured depth on a thin margin
        self._chosen[batch_size] = (self._rounds, best)
        return best


def row_depths(
    rows: Sequence[Row],
    draft_depth: int,
    verify_tokens_per_row: int,
    cap: int | None,
    in_flight: int = 0,
) -> np.ndarray:
    """[B] each row's draft depth this round: the request's or the engine's `draft_depth`,
    clamped to what fits, and to the policy's `cap` where the row's tokens allow it.

    The bonus token counts against max_tokens and the context, and one verify forward carries
    at most max_verify_tokens (B * verify_tokens_per_row) tokens, so deep drafts shrink instead
    of failing. The cap applies to depth-invariant rows only (greedy, coupled sampling).
    `in_flight`: tokens a row may have emitted in a pipelined round not read yet (greedy rows
    only, whose tokens do not depend on depth), so the budget is counted conservatively.
    """
    capacity = max(0, verify_tokens_per_row - 1)
    row_cap = cap if cap is not None and cap < draft_depth else MAX_DEPTH
    return np.array(
        [
            max(
                0,
                min(
                    r.params.draft_depth or draft_depth,
                    row_cap if r.params.depth_invariant else MAX_DEPTH,
                    r.remaining - in_flight - 1,
                    capacity,
                ),
            )
            for r in rows
        ],
        dtype=np.int64,
    )


def _features(B: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[N, 5]: intercept, rows, drafting at all, draft steps, row-steps (verify width and drafts)."""
    return np.stack([np.ones_like(B), B, (k > 0).astype(np.float64), k, B * k], axis=1)
