"""Rows joining and leaving a running ragged cache in place (workers/kv_cache.py's membership).

A layer's parts are [R, H, S, *] with R >= B (the batch's rows come first; the rest are spare,
never read). Rows joining are written into the spare rows after the batch; rows leaving are
replaced by the batch's last rows (`fill_holes`), so a join or a leave writes the rows that
change, not the batch. Concatenating and gathering every row copied the whole cache at each
join and leave: 14-21 ms a join and ~13 ms a leave at 16 rows of the default model on the
2-core CPU, where drafting makes rows finish in different rounds (12 joins and 18 leaves
against plain's 7 and 7 in one worker's share of the demo's job; bench/results/s50/). The
arrays grow by doubling (`spare_rows`), and a leave that keeps fewer than half their rows
gathers them instead (`_moves`), so spare rows at most double the batch's memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from workers.cache_types import LayerCache, concat_rows


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


def keep_in_place(
    layers: Sequence[LayerCache], keep: list[int], rows: mx.array, max_len: int, slots: int
) -> bool:
    """Keep rows `keep` (`rows`: the same, [n] int32) of every layer, moving only the rows that
    fill holes, when `_moves` allows it; False (nothing done): the caller gathers. `slots`: the
    slot capacity rows of at most `max_len` tokens keep."""
    moves = _moves(layers, keep, slots)
    if moves is None:
        return False
    dest, src = moves
    moved = [[p[src] for p in layer.row_parts()] if dest else [] for layer in layers]
    if dest:
        mx.eval(moved)  # the moved rows apart from the arrays they go back into (`put_rows`)
    for layer, rows_moved in zip(layers, moved):
        layer.place_rows(dest, rows_moved, rows, max_len)
    return True


def _moves(
    layers: Sequence[LayerCache], keep: list[int], slots: int
) -> tuple[list[int], mx.array] | None:
    """(dest, src: [n] int32) where `keep` only moves rows from past its end into holes before
    it (`fill_holes`), at least half the arrays' rows stay and no layer's slots would shrink
    (a gather trims them to the rows left, bounding the memory spare rows and slots hold);
    else None."""
    n = len(keep)
    firsts = _first_parts(layers)
    if firsts and 2 * n < firsts[0].shape[0]:
        return None  # fewer than half the rows left: gathered, the arrays shrink to them
    dest = [i for i, j in enumerate(keep) if j != i]
    if any(keep[i] < n for i in dest):
        return None  # a permutation of kept rows: gathered
    if any(p.shape[2] != slots for p in firsts):
        return None
    return dest, mx.array(np.array([keep[i] for i in dest], dtype=np.int32))


def join_capacity(
    layers: Sequence[LayerCache], rows: int, row_capacity: int, slot_budget: int
) -> int:
    """Rows the arrays of `layers` (ours and the joiners') may hold once `rows` rows are in:
    `row_capacity`, cut to what `slot_budget` tokens of KV allow at their widest slot axis
    (never below `rows`); 0 (no spare rows) stays 0."""
    slots = max((p.shape[2] for p in _first_parts(layers)), default=0)
    if row_capacity and slot_budget and slots:
        return min(row_capacity, max(rows, slot_budget // slots))
    return row_capacity


def _first_parts(layers: Sequence[LayerCache]) -> list[mx.array]:
    """Each layer's first row part [R, H, S, *] (layers without row parts, or none yet: none)."""
    return [parts[0] for x in layers if (parts := x.row_parts())]


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
