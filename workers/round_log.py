"""The depth policy's measurements (workers/depth_policy.py): each round's cost and acceptance
taken in, and the rounds set aside. A round that paid a one-time cost far beyond its depth's
(`_one_off`: MLX CUDA compiling for a new shape) or that spiked over its shape's usual cost
(`_spike`: a new attention span's build) sets no cost; a depth switch and a shape's first round
are measured as such (the switch and build costs the choice charges). A mixin of the policy:
the state it reads and keeps is declared below (depth_policy.py says what each holds).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from workers.round_costs import median


class RoundLog:
    """DepthPolicy's `observe`: what each round cost and accepted."""

    # Settings of the policy
    max_depth: int
    extremes_only: bool
    window: int
    decay: float
    run: int
    hopeless_ratio: float
    one_off_factor: float
    one_off_max: int
    spike_factor: float
    # Measurements kept here
    _rows: deque  # (B, k, seconds)
    _seen: set
    _built_live: set
    _tried: np.ndarray
    _hit: np.ndarray
    _rounds: int
    _drafted: float
    _accepted: float
    _first: dict
    _count: dict
    _worst: dict
    _time_total: float
    _last_k: int
    _switch: deque
    _build: deque
    _one_offs: dict
    _spiked: set

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
        self._time_total += step_time_s
        k = int(draft_counts.max(initial=0))
        if self.extremes_only and k > 0:
            # Every drafting round is the deepest round's graph (drafts padded to one width per
            # batch size), whatever the rows drafted: a round capped below max_depth (by
            # max_verify_tokens at a large B, or rows near their budgets) is a max round. Filed
            # under its count, a capped batch size never measured max and probed it forever.
            k = self.max_depth
        self._count_acceptance(draft_counts, num_accepted, k)
        # A switch of depth, and a shape's first round, pay their own one-time costs (a graph
        # rebuild, a build) and are measured as such below, never set aside as spikes.
        switched = k != self._last_k and self._last_k >= 0
        if not switched and (B, k) in self._seen and self._spike(B, k, step_time_s):
            self._spiked.add((B, k))
            self._last_k = k
            return
        if step_time_s <= self.spike_factor * self._first.get((B, k), 0.0):
            self._spiked.discard((B, k))  # back to its usual cost: a later spike is one again
        if self._one_off(B, k, step_time_s):
            self._one_offs[(B, k)] = self._one_offs.get((B, k), 0) + 1
            self._seen.add((B, k))  # it paid the shape's one-time costs
            self._last_k = k
            return
        if switched and self._count.get((B, k), 0) >= 2:
            typical = [t for b, j, t in self._rows if (b, j) == (B, k)]
            if typical:
                self._switch.append(max(0.0, step_time_s - median(typical)))
        self._last_k = k
        if switched and self.run > 1 and (B, k) in self._seen:
            self._count[(B, k)] = self._count.get((B, k), 0) + 1
            return  # it carries the switch (see `run`): measured as one, not as the depth
        self._first[(B, k)] = min(step_time_s, self._first.get((B, k), float("inf")))
        self._count[(B, k)] = self._count.get((B, k), 0) + 1
        self._worst[(B, k)] = max(step_time_s, self._worst.get((B, k), 0.0))
        if (B, k) in self._seen:
            if self._count[(B, k)] == 2 and (B, k) in self._built_live:
                # the shape's second round: what its first cost more (a first round this
                # policy saw: a shape built by the warm-up or a one-off set no build)
                self._build.append(max(0.0, self._worst[(B, k)] - step_time_s))
            self._rows.append((B, k, step_time_s))
        else:  # a shape's first round pays one-time costs (kernel builds, cache growth)
            self._seen.add((B, k))
            self._built_live.add((B, k))
        while len(self._rows) > self.window:
            self._rows.popleft()

    def _count_acceptance(self, draft_counts: np.ndarray, num_accepted: np.ndarray, k: int) -> None:
        if k == 0:  # nothing drafted, nothing to count: only the forgetting (a plain round's
            # host time matters most where drafting does not pay)
            self._tried *= self.decay
            self._hit *= self.decay
            self._drafted *= self.decay
            self._accepted *= self.decay
            return
        # Position j was tried by rows that drafted more than j tokens and had the j before it
        # accepted; it was accepted by rows whose run reached past it.
        j = np.arange(self.max_depth)[None, :]  # [1, D]
        counts = np.minimum(draft_counts, self.max_depth)[:, None]  # [B, 1]
        acc = num_accepted[:, None]  # [B, 1]
        self._tried = self._tried * self.decay + ((j < counts) & (j <= acc)).sum(0)
        self._hit = self._hit * self.decay + (j < acc).sum(0)
        self._drafted = self._drafted * self.decay + float(draft_counts.sum())
        self._accepted = self._accepted * self.decay + float(num_accepted.sum())

    def _spike(self, batch_size: int, k: int, step_time_s: float) -> bool:
        """Whether this round (of a shape seen before, at the depth of the round before it)
        cost over `spike_factor` times its depth's typical round at this batch size or a larger
        one, this shape's rounds at their usual cost since its last spike."""
        if not self.one_off_max or (batch_size, k) in self._spiked:
            return False
        fastest = self._first.get((batch_size, k))
        if fastest is not None and step_time_s <= self.spike_factor * fastest:
            return False  # within reach of this shape's fastest round: no scan (most rounds)
        by_size: dict[int, list[float]] = {}
        for b, j, t in self._rows:
            if j == k and b >= batch_size:
                by_size.setdefault(b, []).append(t)
        typical = [median(ts) for ts in by_size.values() if len(ts) >= 2]
        return bool(typical) and step_time_s > self.spike_factor * min(typical)

    def _one_off(self, batch_size: int, k: int, step_time_s: float) -> bool:
        """Whether this round paid a one-time cost far beyond any round of its depth (see
        `one_off_factor`), judged against plain rounds measured at this batch size."""
        if self._one_offs.get((batch_size, k), 0) >= self.one_off_max:
            return False  # (first: the CPU's policy, one_off_max 0, scans no rows per round)
        bound = self.one_off_factor * (1 + k + self.hopeless_ratio * k)
        if step_time_s <= bound * self._first.get((batch_size, 0), float("inf")):
            return False  # within reach of the fastest plain round: no scan (most rounds)
        plain = [t for b, j, t in self._rows if b == batch_size and j == 0]
        if not plain:
            return False
        most = median(plain) * (1 + k + self.hopeless_ratio * k)
        return step_time_s > self.one_off_factor * most
