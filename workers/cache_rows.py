"""Rows joining and leaving a running ragged cache in place (workers/kv_cache.py's membership).

A layer's parts are [R, H, S, *] with R >= B (the batch's rows come first; the rest are spare,
never read). Rows joining are written into the spare rows after the batch; rows leaving are
replaced by the batch's last rows (`fill_holes`), so a join or a leave writes the rows that
change, not the batch. Concatenating and gathering every row copied the whole cache at each
join and leave: 14-21 ms a join and ~13 ms a leave at 16 rows of the default model on the
2-core CPU, where drafting makes rows finish in different rounds (12 joins and 18 leaves
against plain's 7 and 7 in one worker's share of the demo's job; bench/results/s50/). The
arrays grow by doubling (`spare_rows`), and a leave that keeps fewer than half their rows
gathers them instead (`BatchCache._moves`), so spare rows at most double the batch's memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from workers.cache_types import concat_rows


def fill_holes(keep: Sequence[int], num_rows: int) -> list[int]:
    """The order rows take when only `keep` (ascending old indices) of `num_rows` stay: each
    row that stays keeps its place, except that the holes before the new end take the rows
    past it (ascending), so the cache moves those rows only (`BatchCache.keep_rows`).
    fill_holes([0, 1, 3, 4, 5], 6) == [0, 1, 5, 3, 4]."""
    keep = list(keep)
    assert keep == sorted(set(keep)) and all(0 <= j < num_rows for j in keep), keep
    n, kept = len(keep), set(keep)
    order = list(range(n))
    holes = [i for i in range(n) if i not in kept]
    tail = [j for j in keep if j >= n]  # as many as the holes
    for hole, j in zip(holes, tail):
        order[hole] = j
    return order


def spare_rows(needed: int, held: int, capacity: int) -> int:
    """Rows an array holding `held` grows to for `needed`: twice as many, up to `capacity`,
    so that growing copies the cache once per doubling."""
    return max(needed, min(capacity, 2 * held))


def spare_slots(slots: mx.array, R: int) -> mx.array:
    """[R, 1, W, 1]: the batch's window slots [B, 1, W, 1], then slots [0, W) for spare rows
    (their writes land where nobody reads)."""
    B, _, W, _ = slots.shape
    spare = mx.broadcast_to(mx.arange(W, dtype=slots.dtype)[None, None, :, None], (R - B, 1, W, 1))
    return mx.concatenate([slots, spare])


def put_rows(stored: mx.array, dest: list[int], rows: mx.array) -> mx.array:
    """`stored` with rows `dest` replaced by `rows` ([n, H, S', *], S' <= S): one slice update
    a row, in place where MLX may donate `stored` (a scatter along the row axis copied the
    whole array: 17.2 against 4.7 ms for two rows of 16, bench/results/s50/row_ops_cpu.txt).
    `rows` must be evaluated: a lazy gather of `stored` would keep its buffer from donation."""
    for k, i in enumerate(dest):
        start = mx.array([i, 0, 0, 0])
        stored = mx.slice_update(stored, rows[k : k + 1], start, axes=(0, 1, 2, 3))
    return stored


def append_parts(
    mine: list[mx.array],
    theirs: list[mx.array],
    num_self: int,
    num_other: int,
    capacity: int = 0,
) -> list[mx.array]:
    """Their rows after our first `num_self`: with `capacity`, written into spare rows (the
    arrays grow to `spare_rows` when they lack them); without, concatenated."""
    if capacity and mine and theirs:
        return _into_spare_rows(mine, theirs, num_self, num_other, capacity)
    mine = [m[:num_self] for m in mine]  # spare rows dropped
    if mine and theirs:
        cap = max(mine[0].shape[2], theirs[0].shape[2])
        mine, theirs = [pad_slots(x, cap) for x in mine], [pad_slots(x, cap) for x in theirs]
    a: list[mx.array | None] = list(mine) or [None] * len(theirs)
    b: list[mx.array | None] = list(theirs) or [None] * len(mine)
    out = [concat_rows(m, t, num_self, num_other) for m, t in zip(a, b)]
    return [x for x in out if x is not None]


def _into_spare_rows(
    mine: list[mx.array], theirs: list[mx.array], num_self: int, num_other: int, capacity: int
) -> list[mx.array]:
    needed = num_self + num_other
    cap = max(mine[0].shape[2], theirs[0].shape[2])
    start = mx.array([num_self, 0, 0, 0])
    placed = []
    for m, t in zip(mine, theirs):
        m = pad_slots(m, cap)  # their prompts reach past our slots: a copy, as before
        if m.shape[0] < needed:  # a copy, once per doubling
            grow = spare_rows(needed, m.shape[0], capacity) - m.shape[0]
            m = mx.pad(m, [(0, grow), (0, 0), (0, 0), (0, 0)])
        placed.append(mx.slice_update(m, t[:num_other], start, axes=(0, 1, 2, 3)))
    return placed


def pad_slots(x: mx.array, cap: int) -> mx.array:
    """[R, H, cap, *]: x's slot axis padded to `cap`."""
    if x.shape[2] == cap:
        return x
    return mx.pad(x, [(0, 0), (0, 0), (0, cap - x.shape[2]), (0, 0)])
