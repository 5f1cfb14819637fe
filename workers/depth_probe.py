"""The depth policy's measuring moves (workers/depth_policy.py): each batch-size bucket's
warm-up probe, its early stop when no deeper depth can pay, and the budget that bounds later
explorations. A mixin of the policy: the measurements it reads and the two it keeps (which
buckets are probed, what exploring has cost) are declared below.
"""

from __future__ import annotations

import numpy as np

from workers.round_costs import expected_tokens


class BucketProbe:
    """DepthPolicy's warm-up probe and exploration budget."""

    # Settings and measurements of the policy (workers/depth_policy.py says what each holds)
    max_depth: int
    run: int
    probe_rerun: bool
    min_evidence: int
    explore_budget: float
    _count: dict  # (B, k) -> rounds seen
    _first: dict  # (B, k) -> fastest round seen
    _worst: dict  # (B, k) -> slowest round seen
    _seen: set  # (B, k) shapes whose first round was dropped
    _chosen: dict  # B -> (round chosen at, depth)
    hold_depth: bool
    _held: int  # the depth the last choice made or kept
    _tried: np.ndarray  # [max_depth] decayed rows that reached position j
    _time_total: float
    # Kept here
    _probed: set  # batch-size buckets whose warm-up is done
    live_probes: bool  # False: no bucket is probed on traffic (MLX CUDA)
    _explore_loss: float  # predicted seconds exploration has cost over the best depth

    def depths(self) -> list[int]:
        raise NotImplementedError

    def acceptance(self) -> np.ndarray:
        raise NotImplementedError

    def round_costs(self, batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def build_cost(self) -> float:
        raise NotImplementedError

    def switch_cost(self) -> float:
        raise NotImplementedError

    def _rates(
        self, batch_size: int, switching_from: int | None = None, costs: np.ndarray | None = None
    ) -> np.ndarray:
        raise NotImplementedError

    def _probe(self, batch_size: int) -> int | None:
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
        if bucket in self._probed or not self.live_probes:
            return None
        counts, need = self._bucket_counts(bucket), max(2, self.run)
        for k in self.depths():
            if counts.get(k, 0) < need:
                if k >= 2 and self._deeper_cannot_pay(bucket):
                    break
                return k
        # Plain again, after the drafting depths: the ladder's first rounds pay one-off costs
        # (a fresh process's first buffers, caches filling) that made plain decoding look
        # dearer than it is, and drafting then chosen where it lost (the demo's batch job).
        if self.probe_rerun and counts.get(0, 0) < 2 * need:
            return 0
        self._probed.add(bucket)
        return None

    def _bucket_counts(self, bucket: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for (b, k), n in self._count.items():
            if b.bit_length() == bucket:
                counts[k] = counts.get(k, 0) + n
        return counts

    def _deeper_cannot_pay(self, bucket: int) -> bool:
        """Neither the deepest measured depth m >= 1 nor any deeper one can beat a shallower
        measured depth in this bucket, even with every draft accepted: a round of depth >= m
        costs at least the fastest round seen at m (first rounds included, per row), and
        emits at most 1 + max_depth tokens per row."""
        per_row: dict[int, float] = {}  # depth -> fastest seconds per row in this bucket
        for (b, j), t in self._first.items():
            if b.bit_length() == bucket:
                per_row[j] = min(per_row.get(j, float("inf")), t / b)
        m = max(per_row, default=0)
        # Two rounds each: one alone may be a one-off (a GPU building kernels for a new shape).
        if m < 1 or 0 not in per_row or self._bucket_counts(bucket).get(m, 0) < 2:
            return False
        c = self.acceptance()
        best = max(expected_tokens(c, j) / max(t, 1e-12) for j, t in per_row.items() if j < m)
        ks = np.arange(m, self.max_depth + 1)
        if (self._tried[:m] >= self.min_evidence).all():
            # Acceptance up to m is measured (a large batch's two rounds): bound depth k >= m by
            # m's tokens plus every further draft accepted, over m's time plus the per-depth
            # cost seen from 0 to m for each further step (a verify's cost grows at least
            # linearly with its width once compute-bound, the case where drafting stops paying).
            reach = np.cumprod(c[:m])
            tokens = 1 + reach.sum() + (ks - m) * reach[-1]
            seconds = per_row[m] + (ks - m) * max(0.0, (per_row[m] - per_row[0]) / m)
        else:  # too few rows seen yet (one row's two rounds): every draft accepted
            tokens, seconds = np.full(len(ks), 1.0 + self.max_depth), np.full(len(ks), per_row[m])
        return bool((tokens / np.maximum(seconds, 1e-12) <= best).all())

    def _current(self, batch_size: int) -> int:
        """The depth a change is charged from: with `hold_depth` the one the engine holds,
        whichever batch size chose it (a switch's cost is the depth's); else, as before stop
        39, this size's last choice (the CPU's choices unchanged)."""
        return self._held if self.hold_depth else self._chosen.get(batch_size, (0, 0))[1]

    def _may_explore(self, batch_size: int, k: int, run: int = 1) -> bool:
        """Explore depth k for `run` rounds only while exploring's cost stays within budget,
        its first round costed at the slowest drafting round seen at this batch size: a
        drafter's first proposal after rounds without drafts may carry one-off work (a draft
        model catching up on the tokens it skipped) that a median would hide."""
        rates = self._rates(batch_size)
        worst = max(
            (t for (b, j), t in self._worst.items() if b == batch_size and j > 0), default=0.0
        )
        cost = run * self.round_costs(batch_size)[k] + (worst if k > 0 else 0.0)
        best = max(rates[self.depths()].max(), 1e-9)
        loss = max(0.0, cost - run * expected_tokens(self.acceptance(), k) / best)
        if (batch_size, k) not in self._seen:
            loss += self.build_cost()  # a shape never run: its first round builds it
        if k != self._current(batch_size):
            loss += 2 * self.switch_cost()  # there and back
        if self._explore_loss + loss > self.explore_budget * self._time_total:
            return False
        self._explore_loss += loss
        return True
