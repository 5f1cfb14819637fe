"""Ragged per-row KV cache: every row's tokens sit at contiguous positions [0, length_r).

Layout. Each layer holds keys/values of shape [B, H, S_cap, D]. Row r's committed tokens occupy
slots [0, length_r) in order, so a row's physical slot equals its logical (RoPE) position and
nothing sits between them: there is no left padding and there are no holes. A forward over a
window of W new tokens writes row r's window at slots [length_r, length_r + W) with one scatter
(`put_along_axis`), rotates it at the same per-row positions, and masks keys by
`slot <= length_r + i` for window query i. Slots past a row's length are stale (rejected drafts,
padding of shorter rows) and are always masked out, never zeroed: a zeroed key still weighs
exp(0) in the softmax.

Compaction. After verify the row keeps only its first n_r window tokens (the accepted prefix):
`commit(n)` sets length_r += n_r. The accepted tokens are already at their final slots, the
rejected tail lies beyond the new length and is overwritten by the next window. Its cost is
O(B), the window's write is O(B·W): neither grows with the context (mlx-vlm rolls the whole
sequence axis of every layer each round; mlxcel moves the window down after writing it at a
shared offset).

One `BatchCache` owns the per-row lengths for all layers of one model, so the layers can never
disagree about where a row ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

STEP = 256  # grow the slot axis in multiples of this, as mlx-lm's KVCache does
SPAN = 128  # attention reads slot spans rounded up to this (divides STEP)


class RaggedKVCache:
    """One attention layer's cache; the duck type mlx-lm attention expects.

    mlx-lm layers call `rope(x, offset=cache.offset)` then `cache.update_and_fetch(k, v)`;
    the model calls `cache.make_mask(N)` through `create_attention_mask`.
    """

    def __init__(self, owner: BatchCache):
        self.owner = owner
        self.keys: mx.array | None = None  # [B, H, S_cap, Dk]
        self.values: mx.array | None = None  # [B, H, S_cap, Dv]

    # -- the mlx-lm duck type -------------------------------------------------------------
    @property
    def offset(self) -> mx.array:
        return self.owner.lengths_mx  # [B] per-row RoPE position of window token 0

    def make_mask(
        self, N: int, return_array: bool = False, window_size: int | None = None, **_: object
    ) -> mx.array:
        return self.owner.window_mask(N, window_size)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        B, H, W, Dk = keys.shape
        needed = self.owner.window_end(W)
        self._reserve(B, H, Dk, values.shape[3], keys.dtype, needed)
        assert self.keys is not None and self.values is not None
        slots = self.owner.window_slots(W)  # [B, 1, W, 1]
        self.keys = mx.put_along_axis(
            self.keys, mx.broadcast_to(slots, (B, H, W, Dk)), keys, axis=2
        )
        self.values = mx.put_along_axis(
            self.values, mx.broadcast_to(slots, (B, H, W, values.shape[3])), values, axis=2
        )
        return self.keys[..., :needed, :], self.values[..., :needed, :]

    # -- storage ----------------------------------------------------------------------------
    def _reserve(self, B: int, H: int, Dk: int, Dv: int, dtype: mx.Dtype, needed: int) -> None:
        cap = 0 if self.keys is None else self.keys.shape[2]
        if needed <= cap:
            return
        new_cap = ((needed + STEP - 1) // STEP) * STEP
        grow_k = mx.zeros((B, H, new_cap - cap, Dk), dtype)
        grow_v = mx.zeros((B, H, new_cap - cap, Dv), dtype)
        if self.keys is None:
            self.keys, self.values = grow_k, grow_v
        else:
            assert self.values is not None
            self.keys = mx.concatenate([self.keys, grow_k], axis=2)
            self.values = mx.concatenate([self.values, grow_v], axis=2)

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def on_commit(self, n: np.ndarray | mx.array) -> None:
        pass  # kept tokens are already in place; the owner's lengths say where rows end

    def take_rows(self, rows: mx.array, max_len: int) -> None:
        if self.keys is None or self.values is None:
            return
        cap = max(STEP, ((max_len + STEP - 1) // STEP) * STEP)
        self.keys = self.keys[rows, :, :cap]
        self.values = self.values[rows, :, :cap]

    def append_rows(self, other: RaggedKVCache, num_self: int, num_other: int) -> None:
        mine_k, mine_v, their_k, their_v = self.keys, self.values, other.keys, other.values
        if mine_k is not None and their_k is not None:
            assert mine_v is not None and their_v is not None
            cap = max(mine_k.shape[2], their_k.shape[2])
            mine_k, mine_v = _pad_slots(mine_k, cap), _pad_slots(mine_v, cap)
            their_k, their_v = _pad_slots(their_k, cap), _pad_slots(their_v, cap)
        self.keys = concat_rows(mine_k, their_k, num_self, num_other)
        self.values = concat_rows(mine_v, their_v, num_self, num_other)


def _pad_slots(x: mx.array, cap: int) -> mx.array:
    if x.shape[2] == cap:
        return x
    return mx.pad(x, [(0, 0), (0, 0), (0, cap - x.shape[2]), (0, 0)])


def concat_rows(
    mine: mx.array | None, theirs: mx.array | None, num_self: int, num_other: int
) -> mx.array | None:
    """Stack two groups of rows; a group that never ran a forward (no array yet) gets zeros
    of the other's shape, so every row keeps a slot."""
    if mine is None and theirs is None:
        return None
    if mine is None:
        assert theirs is not None
        mine = mx.zeros((num_self,) + theirs.shape[1:], theirs.dtype)
    if theirs is None:
        theirs = mx.zeros((num_other,) + mine.shape[1:], mine.dtype)
    return mx.concatenate([mine, theirs])


class BatchCache:
    """All layers' ragged caches of one model plus the per-row committed lengths."""

    def __init__(self, recurrent: Sequence[bool], num_rows: int = 0):
        from workers.hybrid import RaggedStateCache

        self.recurrent = list(recurrent)
        # [B] committed tokens per row: exact on the device (lengths_mx); on the host exact
        # after host commits, an upper bound after `commit_lazy` (a round still in flight).
        self.lengths = np.zeros(num_rows, dtype=np.int64)
        self.layers: list = [
            RaggedStateCache(self) if rec else RaggedKVCache(self) for rec in self.recurrent
        ]
        self.window_valid = np.zeros(num_rows, dtype=np.int64)  # [B] real tokens in the window
        self._slots: dict[int, mx.array] = {}  # reset by set_window_valid before each forward
        self._refresh()

    @classmethod
    def for_model(cls, model: object, num_rows: int = 0) -> BatchCache:
        return cls(layer_kinds(model), num_rows)

    @property
    def num_rows(self) -> int:
        return int(self.lengths.shape[0])

    def _refresh(self) -> None:
        self.lengths_mx = mx.array(self.lengths.astype(np.int32))

    def set_window_valid(self, valid: np.ndarray) -> None:
        """How many of the next window's tokens are real per row (the rest is padding)."""
        self.window_valid = np.asarray(valid, dtype=np.int64)
        self.window_valid_mx = mx.array(self.window_valid.astype(np.int32))
        self._slots = {}  # W -> window slots, shared by every layer

    # -- window geometry (shared by every layer in one forward) ------------------------------
    def window_end(self, W: int) -> int:
        """Slots attention reads for a W-token window, rounded up to a multiple of SPAN.

        Rounding keeps attention shapes the same across many rounds, so backends that build
        kernels or graphs per shape (MLX's CUDA SDPA: ~40 ms per new shape on an H200) reuse
        them; the extra slots are stale and masked like any other.
        """
        end = int(self.lengths.max(initial=0)) + W
        return ((end + SPAN - 1) // SPAN) * SPAN

    def window_slots(self, W: int) -> mx.array:
        """[B, 1, W, 1] each window token's slot; built once per forward, not once per layer
        (on a GPU every op is a kernel launch the host pays for)."""
        slots = self._slots.get(W)
        if slots is None:
            slots = (self.lengths_mx[:, None] + mx.arange(W)[None])[:, None, :, None]
            self._slots[W] = slots
        return slots

    def window_mask(self, W: int, window_size: int | None = None) -> mx.array:
        """[B, 1, W, S] True where window query i of row r may attend slot j."""
        S = self.window_end(W)
        slot = mx.arange(S)[None, None, None, :]
        query_pos = (self.lengths_mx[:, None] + mx.arange(W)[None])[:, None, :, None]
        mask = slot <= query_pos
        if window_size is not None:
            mask = mask & (slot > query_pos - window_size)
        return mask

    # -- compaction: the one operation that moves row ends -----------------------------------
    def commit(self, num_new: Sequence[int] | np.ndarray) -> None:
        """Keep the first num_new[r] tokens of the last window for each row r.

        The kept tokens are already at slots [length_r, length_r + n_r); everything past the
        new length is stale and masked, so this is all compaction costs.
        """
        n = np.asarray(num_new, dtype=np.int64)
        assert n.shape == self.lengths.shape and (n >= 0).all()
        self.lengths = self.lengths + n
        for layer in self.layers:
            layer.on_commit(n)
        self.lengths_mx = self.lengths_mx + mx.array(n.astype(np.int32))

    def commit_lazy(self, num_new: mx.array, most: int) -> None:
        """`commit` with counts still on the device ([B] int32, each <= `most`): no host sync.

        The device lengths are exact; the host's become upper bounds (+most per row), which is
        all the host needs them for (attention span, slot capacity), until `tighten` narrows
        them again from what the host learns later. Recurrent layers pick each row's state after
        its own count on the device (verify windows keep every position's state).
        """
        self.lengths = self.lengths + most
        for layer in self.layers:
            layer.on_commit(num_new)
        self.lengths_mx = self.lengths_mx + num_new.astype(mx.int32)

    def tighten(self, bounds: np.ndarray, rows: np.ndarray) -> None:
        """Narrow the host's upper bounds to `bounds` [B] where `rows` [B] bool is set."""
        self.lengths = np.where(rows, np.minimum(self.lengths, bounds), self.lengths)

    def rollback(self, num_drop: Sequence[int] | np.ndarray) -> None:
        """Forget the last num_drop[r] committed tokens of each row (drafter caches)."""
        if any(self.recurrent):
            raise ValueError("recurrent layers cannot roll back; use them only in targets")
        d = np.asarray(num_drop, dtype=np.int64)
        assert d.shape == self.lengths.shape and (d >= 0).all() and (d <= self.lengths).all()
        self.lengths = self.lengths - d
        self.lengths_mx = self.lengths_mx - mx.array(d.astype(np.int32))

    # -- membership --------------------------------------------------------------------------
    def keep_rows(self, keep: Sequence[int]) -> None:
        """Drop every row not in `keep` (finished or aborted rows), preserving order."""
        keep_idx = list(keep)
        # The window array describes the last forward, which may predate rows that joined since
        # (a round that drafted nothing runs no draft forward): index it one entry per row.
        window = self._window_rows()
        self.lengths = self.lengths[keep_idx] if keep_idx else np.zeros(0, dtype=np.int64)
        rows = mx.array(np.asarray(keep_idx, dtype=np.int32))
        max_len = int(self.lengths.max(initial=0))
        if keep_idx:
            for layer in self.layers:
                layer.take_rows(rows, max_len)
        else:
            self.layers = BatchCache(self.recurrent).layers
            for layer in self.layers:
                layer.owner = self
        self.window_valid = window[keep_idx] if keep_idx else self.lengths.copy()
        # The device lengths may be ahead of the host's bounds (a round in flight): gather them.
        self.lengths_mx = self.lengths_mx[rows] if keep_idx else mx.zeros(0, dtype=mx.int32)

    def append(self, other: BatchCache) -> None:
        """Append other's rows after ours (new requests joining a running batch)."""
        assert other.recurrent == self.recurrent
        for mine, theirs in zip(self.layers, other.layers):
            mine.append_rows(theirs, self.num_rows, other.num_rows)
        self.window_valid = np.concatenate([self._window_rows(), other._window_rows()])
        self.lengths = np.concatenate([self.lengths, other.lengths])
        self.lengths_mx = mx.concatenate([self.lengths_mx, other.lengths_mx])

    def _window_rows(self) -> np.ndarray:
        """window_valid with exactly one entry per row (rows it has not seen: 0)."""
        w = np.zeros(self.num_rows, dtype=np.int64)
        n = min(len(self.window_valid), self.num_rows)
        w[:n] = self.window_valid[:n]
        return w

    def state_arrays(self) -> list[mx.array]:
        return [a for layer in self.layers for a in layer.arrays()]


def layer_kinds(model: object) -> list[bool]:
    """Which layers are recurrent; fail early, naming the cache type, for unsupported ones."""
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    from workers.hybrid import install

    recurrent = install(model)
    make_cache = getattr(model, "make_cache", None)
    if make_cache is None:
        return recurrent
    for i, (c, rec) in enumerate(zip(make_cache(), recurrent)):
        # Sliding-window layers keep full rows here; the model passes window_size to the mask,
        # which then hides keys older than the window (memory is not bounded by the window).
        sliding = type(c) is RotatingKVCache and c.keep == 0
        ok = isinstance(c, ArraysCache) if rec else (type(c) is KVCache or sliding)
        if not ok:
            raise ValueError(
                f"layer {i} uses {type(c).__name__}, which the ragged batch cache does not "
                "support yet; use a model whose layers use mlx-lm KVCache (llama, qwen2, qwen3, "
                "mistral, gemma3, ...) or GatedDeltaNet (qwen3_5, qwen3_next)"
            )
    return recurrent
