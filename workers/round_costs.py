"""What a round of B rows at depth k costs, from the rounds observed (workers/depth_policy.py).

The depth policy keeps each round it counts as (B, k, seconds). A shape's cost is the median of
its recent rounds: robust to one-off spikes, which the policy also sets aside (`_spike`,
`_one_off`). A shape with no counted round gets a least-squares fit over every shape's median,
on [1, B, k > 0, k, B*k]: the intercept, the rows, a drafter's fixed cost per round (an MTP head
folding in the last verify's hidden states), its cost per draft step, and the verify's width
on B rows. A depth never timed at that size costs at least what the deepest timed depth below
it costs, and where each new shape is a build (MLX CUDA) no shape costs more than the cheapest
cell of more rows or more drafts (`cost_table`'s `cap_by_larger`). Pure numpy and Python: the
policy calls these once per choice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

LIVE_ROUNDS = 3  # live rounds of a shape before its median replaces the warm-up's

Cell = tuple[int, int]  # (batch size, depth)


def expected_tokens(cond_accept: np.ndarray, depth: int) -> float:
    """Tokens one row emits with `depth` drafts: the bonus token plus the accepted run."""
    return 1.0 + float(np.cumprod(cond_accept[:depth]).sum())


def fit_linear(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares coefficients of y ~ features @ coef ([N, F] -> [F]); zeros without data."""
    if len(y) == 0:
        return np.zeros(features.shape[1])
    coef, *_ = np.linalg.lstsq(features, y, rcond=None)
    return np.asarray(coef)


def median(values: Sequence[float]) -> float:
    """np.median of a short list, without numpy's per-call overhead: the policy takes one per
    (B, k) cell per choice, ~27 us each through numpy (a drain choice over 38 cells took 1.2 ms
    of a 2.8 ms round's host time on the H200's machine)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def cell_medians(rounds: Iterable[tuple[int, int, float]]) -> dict[Cell, float]:
    """{(B, k): median seconds} of the rounds counted, (B, k, seconds) each."""
    by_cell: dict[Cell, list[float]] = {}
    for B, k, t in rounds:
        by_cell.setdefault((B, k), []).append(t)
    return {cell: median(ts) for cell, ts in by_cell.items()}


def blend_warm(
    rounds: Sequence[tuple[int, int, float]], warm: dict[Cell, float]
) -> dict[Cell, float]:
    """Live cost medians, and the warm-up's (`warm`) where a shape has run live fewer than
    `LIVE_ROUNDS` times since, scaled by how much dearer plain rounds of that size are live
    than they were in the warm-up (longer contexts, a busier machine: seen 12-19% on two
    contended CPU cores, where unscaled warm-up costs put depth 2 ahead of plain at B=16
    and it then ran 13% dearer). So a cell's value and its error (`_median_error`) always
    come from the same rounds: one noisy live round does not replace a warm-up cell."""
    live = cell_medians(rounds)
    if not warm:
        return live
    counts: dict[Cell, int] = {}
    for b, k, _ in rounds:
        counts[(b, k)] = counts.get((b, k), 0) + 1
    cells = {c: t for c, t in live.items() if c not in warm or counts[c] >= LIVE_ROUNDS}
    for (b, k), t in warm.items():
        if (b, k) not in cells:
            warm0 = float(warm.get((b, 0), 0.0))
            plain_live = counts.get((b, 0), 0) >= LIVE_ROUNDS and warm0 > 0
            cells[(b, k)] = t * (live[(b, 0)] / warm0 if plain_live else 1.0)
    return cells


def cost_table(
    cells: dict[Cell, float],
    first: dict[Cell, float],
    sizes: Sequence[int],
    max_depth: int,
    cap_by_larger: bool = False,
) -> np.ndarray:
    """[len(sizes), max_depth + 1] predicted seconds of a round per batch size and depth: a
    cell's median where it has one, else one fit over all cells (made once for all sizes); a
    shape seen only once costs that round (`first`: its fastest round, the first included).
    `cap_by_larger`: none above the cheapest cell at a larger size and this depth or deeper, or
    at this size and a deeper depth (`_larger_cells_min`)."""
    depths = np.arange(max_depth + 1, dtype=np.float64)
    if not cells:
        return np.zeros((len(sizes), len(depths)))
    keys = np.array(list(cells), dtype=np.float64)  # [C, 2]
    coef = fit_linear(_features(keys[:, 0], keys[:, 1]), np.array(list(cells.values())))
    grid_b = np.repeat(np.asarray(sizes, dtype=np.float64), len(depths))  # [S * (D + 1)]
    grid_k = np.tile(depths, len(sizes))
    fits = np.maximum(0.0, _features(grid_b, grid_k) @ coef).reshape(len(sizes), -1)
    out = np.empty((len(sizes), len(depths)))
    cap = _larger_cells_min(cells, sizes, len(depths)) if cap_by_larger else None
    for i, batch_size in enumerate(sizes):
        fitted = fits[i]
        costs = np.array([cells.get((batch_size, k), fitted[k]) for k in range(len(depths))])
        # A shape seen only once (its first round) costs that round's time. An unseen depth
        # is never cheaper than the deepest seen depth m below it plus m's own last step
        # for every step beyond m (extrapolation cannot pick a depth it has never timed).
        floor, step, last = 0.0, 0.0, -1
        for k in range(len(depths)):
            if (batch_size, k) not in cells and (batch_size, k) in first:
                costs[k] = first[(batch_size, k)]
            if (batch_size, k) in cells or (batch_size, k) in first:
                if last == k - 1 and k > 0:
                    step = max(0.0, costs[k] - costs[k - 1])
                floor, last = max(floor, costs[k]), k
            else:
                costs[k] = max(costs[k], floor + step * (k - last))
        out[i] = costs if cap is None else np.minimum(costs, cap[i])
    return out


def cost_cell(cells: dict[Cell, float], batch_size: int, k: int, priced: float) -> Cell:
    """The cell whose median `cost_table` priced (batch_size, k) at (`priced`, its entry): the
    pair's own, or the larger or deeper cell that capped it (`_larger_cells_min`'s candidates).
    Where neither median is the price (a fit, a first round, a floor), the pair's own."""
    own = (batch_size, k)
    if cells.get(own) == priced:
        return own
    caps = [c for c, t in cells.items() if t == priced
            and ((c[0] > batch_size and c[1] >= k) or (c[0] == batch_size and c[1] > k))]  # fmt: skip
    return min(caps) if caps else own


def _larger_cells_min(cells: dict[Cell, float], sizes: Sequence[int], n_depths: int) -> np.ndarray:
    """[len(sizes), n_depths] the cheapest other cell at this batch size or a larger one, at
    this depth or a deeper one (inf where none): a round of fewer rows or fewer drafts computes
    less, so it costs no more. A size's own few rounds, or its first alone, read higher where
    they paid a build: on MLX CUDA a draining batch's sizes (trained hybrid, H200) read 5-10 ms
    a depth-3 round against 2.9 ms for 16 rows, and the job's-end choice then decoded 100-250
    rounds plainly where depth 3 ran 1.5-2x the tokens a second (bench/results/s35/README.md)."""
    at = np.asarray(sizes, dtype=np.int64)
    assert at.min(initial=0) >= 0
    top = max(max((b for b, _ in cells), default=0), int(at.max(initial=0))) + 2
    grid = np.full((top, n_depths), np.inf)  # [sizes up to the largest + 2, depths]
    for (b, k), t in cells.items():
        assert b >= 0 and k >= 0, (b, k)
        if k < n_depths:
            grid[b, k] = t
    deeper = np.minimum.accumulate(grid[:, ::-1], axis=1)[:, ::-1]  # cheapest at k' >= k
    larger = np.minimum.accumulate(deeper[::-1], axis=0)[::-1]  # ... and at b' >= b
    deeper_here = np.concatenate([deeper[:, 1:], np.full((top, 1), np.inf)], axis=1)  # k' > k
    return np.minimum(larger[at + 1], deeper_here[at])  # b' > b, or b' = b and k' > k


def _features(B: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[N, 5]: intercept, rows, drafting at all, draft steps, row-steps (verify width and drafts)."""
    return np.stack([np.ones_like(B), B, (k > 0).astype(np.float64), k, B * k], axis=1)
