"""What a round at each depth is predicted to cost and emit, and how sure the prediction is: the
depth policy's prices (workers/depth_policy.py), read from the rounds it observed
(workers/round_log.py) and its warm-up's. A shape's cost is its cells' median or the fit
(workers/round_costs.py), its rate the expected tokens over that cost plus what taking the
depth costs once (a build, two switches), and a choice's margin the medians' relative error.
A mixin of the policy: the settings and measurements it reads are declared below
(depth_policy.py says what each holds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workers.round_costs import (
    LIVE_ROUNDS,
    blend_warm,
    cost_cell,
    cost_table,
    expected_tokens,
    median,
)


class RoundPricing:
    """DepthPolicy's prices: round costs, rates, one-time costs, margins."""

    # Settings of the policy
    max_depth: int
    refresh_every: int
    min_gain: float
    error_sigmas: float
    cap_by_larger: bool
    # Measurements (workers/round_log.py, the warm-up's)
    _rows: deque
    _warm: dict
    _warm_error: dict
    _first: dict
    _seen: set
    _build: deque
    _switch: deque

    def acceptance(self) -> np.ndarray:
        raise NotImplementedError

    def round_costs(self, batch_size: int) -> np.ndarray:
        """[max_depth + 1] predicted seconds of one engine step of `batch_size` rows per depth.

        A shape measured at least once (its first round aside) costs its median; the others
        come from one least-squares fit over those medians, made once for all depths.
        """
        return self._round_costs_for([batch_size])[0]

    def _round_costs_for(self, sizes: Sequence[int]) -> np.ndarray:
        """[len(sizes), max_depth + 1] `round_costs` of each batch size, from one fit."""
        return cost_table(self._cells(), self._first, sizes, self.max_depth, self.cap_by_larger)

    def _cells(self) -> dict[tuple[int, int], float]:
        """Live cost medians, blended with the warm-up's (workers/round_costs.py `blend_warm`)."""
        return blend_warm(self._rows, self._warm)

    def _margin(
        self,
        batch_size: int,
        k: int,
        e0: float | None = None,
        costs: np.ndarray | None = None,
        cells: dict[tuple[int, int], float] | None = None,
    ) -> float:
        """The gain over depth 0 that drafting at depth k must be predicted to make: min_gain,
        or `error_sigmas` (2) times the relative error of the two cost medians compared where
        that is larger. On two contended CPU cores single rounds vary by 10-15%: medians of a
        handful of rounds then put a depth that breaks even 10-20% ahead of plain by chance,
        and each such switch costs (the head's backlog, a wait for the shape change); as rounds
        accumulate the error shrinks and a real gain still clears the margin. `costs`
        (`round_costs` of `batch_size`), `e0` (depth 0's error) and `cells` (`_cells()`): when
        the caller has them."""
        costs = self.round_costs(batch_size) if costs is None else costs
        if cells is None:
            cells = self._cells() if self.cap_by_larger else {}  # only caps need them
        e0 = self._cost_error(batch_size, 0, costs[0], cells) if e0 is None else e0
        ek = self._cost_error(batch_size, k, costs[k], cells)
        return max(self.min_gain, self.error_sigmas * float(np.hypot(e0, ek)))

    def _cost_error(
        self, batch_size: int, k: int, priced: float, cells: dict[tuple[int, int], float]
    ) -> float:
        """`_median_error` of the median that priced (batch_size, k): where a larger batch's
        cell capped it (`cap_by_larger`), that cell's, not the error of the medians it
        replaced. On an H200 a lone last row's own cells (a few rounds, each joined or left by
        others) set a margin of 0.69, and the row decoded plainly with depth 3, priced by the
        16-row cells, predicted 1.50x its tokens a second (bench/results/s37). A capping cell
        of fewer than LIVE_ROUNDS live rounds has no error of its own yet (0): the pair's own
        error then stands."""
        cell = cost_cell(cells, batch_size, k, priced) if self.cap_by_larger else (batch_size, k)
        if cell != (batch_size, k):
            ts = self._live_costs(*cell)
            if len(ts) >= LIVE_ROUNDS:
                return _relative_error(ts)
        return self._median_error(batch_size, k)

    def _live_costs(self, batch_size: int, k: int) -> list[float]:
        return [t for b, j, t in self._rows if b == batch_size and j == k]

    def _median_error(self, batch_size: int, k: int) -> float:
        """Relative standard error of the (batch_size, k) cost median: with < 3 live rounds the
        warm-up's, else 0 (too few rounds to tell: `min_gain` alone decides, as a cold
        bucket's probe of two rounds per depth must)."""
        ts = self._live_costs(batch_size, k)
        if len(ts) < LIVE_ROUNDS:
            return float(self._warm_error.get((batch_size, k), 0.0))
        return _relative_error(ts)

    def build_cost(self) -> float:
        """Seconds a shape's first round costs beyond its second (median of recent shapes)."""
        return median(self._build) if len(self._build) >= 2 else 0.0

    def switch_cost(self) -> float:
        """Seconds a change of depth costs beyond its round (median of recent switches)."""
        return median(self._switch) if len(self._switch) >= 2 else 0.0

    def _rates(
        self, batch_size: int, switching_from: int | None = None, costs: np.ndarray | None = None
    ) -> np.ndarray:
        """[max_depth + 1] predicted tokens per second of each depth; `switching_from` (the
        depth now chosen): a choice lasts `refresh_every` rounds, so each depth is also charged
        a `refresh_every`-th of what taking it costs once: the build of a shape never run, and
        two switches (there and back) for a depth other than the current one. On MLX CUDA
        (builds and switches ~15-30 ms against 1-2 ms rounds) drafting then must pay for its
        graphs within the choice; on the CPU both are a few ms against 10-40 ms rounds."""
        c = self.acceptance()
        costs = (self.round_costs(batch_size) if costs is None else costs).copy()
        if switching_from is not None:
            for k in range(self.max_depth + 1):
                costs[k] += self._once(batch_size, k, switching_from) / self.refresh_every
        return np.array(
            [expected_tokens(c, k) / max(costs[k], 1e-9) for k in range(self.max_depth + 1)]
        )

    def _once(self, batch_size: int, k: int, switching_from: int) -> float:
        """Seconds taking depth k costs once: its shape's build if never run, and two switches
        (there and back) if it is not the current depth."""
        once = self.build_cost() * ((batch_size, k) not in self._seen)
        return once + 2 * self.switch_cost() * (k != switching_from)


def _relative_error(ts: list[float]) -> float:
    """Relative standard error of the median of `ts`, from their median absolute deviation."""
    med = median(ts)
    mad = median([abs(t - med) for t in ts])
    return 1.2533 * 1.4826 * mad / max(med, 1e-12) / float(np.sqrt(len(ts)))
