"""One attention layer's share of the ragged batch cache (workers/kv_cache.py owns the rows).

Layout. Each layer holds keys/values of shape [R, H, S_cap, D], R >= B (rows past the batch's B
are spare, workers/cache_rows.py). Row r's committed tokens occupy slots [0, length_r) in order,
so a row's physical slot equals its logical (RoPE) position. A forward over a window of W new
tokens writes row r's window at slots [length_r, length_r + W) with one scatter
(`put_along_axis`), rotates it at the same per-row positions, and masks keys by
`slot <= length_r + i` for window query i. Slots past a row's length are stale (rejected drafts,
padding of shorter rows) and are always masked out, never zeroed: a zeroed key still weighs
exp(0) in the softmax.

Quantized slots (`quant`, EngineConfig.kv_bits): each window's keys and values are quantized
once, one position at a time, before they are written (workers/kv_quant.py says why that keeps
speculative output equal to plain output); attention reads the slots packed (Metal) or decoded to
floats (CPU, CUDA), the same way in every window. Compaction, joins, row removal and rollback
move lengths and whole slots, so they work on packed parts unchanged.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from workers.cache_rows import append_parts, put_rows, spare_slots
from workers.cache_types import CacheOwner
from workers.kv_quant import KVQuant

STEP = 256  # grow the slot axis in multiples of this, as mlx-lm's KVCache does


def slot_capacity(max_len: int) -> int:
    """Slots an array keeps for rows of at most `max_len` tokens: STEP multiples, at least one."""
    return max(STEP, ((max_len + STEP - 1) // STEP) * STEP)


# What a layer hands mlx-lm's attention: keys/values [B, H, S, D], or for a quantized cache
# (packed [B, H, S, D*bits/32], scales [B, H, S, D/g], biases [B, H, S, D/g]).
Fetched = mx.array | tuple[mx.array, ...]


class RaggedKVCache:
    """One attention layer's cache; the duck type mlx-lm attention expects.

    mlx-lm layers call `rope(x, offset=cache.offset)` then `cache.update_and_fetch(k, v)`;
    the model calls `cache.make_mask(N)` through `create_attention_mask`. Keys and values are
    stored as lists of parts that all share the [R, H, S_cap, *] layout (one part here, three
    in QuantizedRaggedKVCache), so every storage operation works part by part along the slot
    axis.
    """

    def __init__(self, owner: CacheOwner):
        self.owner = owner
        self.key_parts: list[mx.array] = []  # each [R, H, S_cap, *] (R >= B: spare rows)
        self.value_parts: list[mx.array] = []

    @property
    def keys(self) -> mx.array | None:
        return self.key_parts[0] if self.key_parts else None  # [R, H, S_cap, Dk]

    # -- the mlx-lm duck type -------------------------------------------------------------
    @property
    def offset(self) -> mx.array:
        return self.owner.lengths_mx  # [B] per-row RoPE position of window token 0

    def make_mask(
        self, N: int, return_array: bool = False, window_size: int | None = None, **_: object
    ) -> mx.array | None:
        if window_size is not None:  # sliding-window layers: the kernel knows no window
            self.owner.kernel_attention = False
        elif not return_array and self.owner.reads_exact_row(N):
            return None  # one row, every slot read is valid: the unmasked (vector) kernel
        return self.owner.window_mask(N, window_size)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Fetched, Fetched]:
        W = keys.shape[2]
        needed = self.owner.window_end(W)
        self.key_parts = self._store(self.key_parts, self.encode(keys), needed, W)
        self.value_parts = self._store(self.value_parts, self.encode(values), needed, W)
        return self.fetch(self.key_parts, needed), self.fetch(self.value_parts, needed)

    def _store(
        self, parts: list[mx.array], new: list[mx.array], needed: int, W: int
    ) -> list[mx.array]:
        """Write the window (`new`, parts [B, H, W, *]) at each row's own slots; rows past the
        batch (spare ones, `row_capacity`) get zeros at slots [0, W), which nobody reads."""
        parts = reserve_slots(parts, new, needed)
        slots = self.owner.window_slots(W)  # [B, 1, W, 1]
        R, B = parts[0].shape[0], new[0].shape[0]
        if R > B:
            slots = self.owner.shared(("spare_slots", W, R), lambda: spare_slots(slots, R))
            new = [mx.pad(n, [(0, R - B), (0, 0), (0, 0), (0, 0)]) for n in new]
        return [_write(old, n, slots) for old, n in zip(parts, new)]

    # -- what a slot stores (QuantizedRaggedKVCache overrides these two) ----------------------
    def encode(self, x: mx.array) -> list[mx.array]:
        return [x]

    def fetch(self, parts: list[mx.array], needed: int) -> Fetched:
        return parts[0][: self.owner.num_rows, :, :needed, :]

    # -- storage ----------------------------------------------------------------------------
    def arrays(self) -> list[mx.array]:
        return self.key_parts + self.value_parts

    def on_commit(self, n: np.ndarray | mx.array, whole: bool = False) -> None:
        pass  # kept tokens are already in place; the owner's lengths say where rows end

    def take_rows(self, rows: mx.array, max_len: int) -> None:
        cap = slot_capacity(max_len)
        self.key_parts = [p[rows, :, :cap] for p in self.key_parts]
        self.value_parts = [p[rows, :, :cap] for p in self.value_parts]

    def row_parts(self) -> list[mx.array]:
        return self.key_parts + self.value_parts  # [R, H, S_cap, *] each: rows move in place

    def place_rows(
        self, dest: list[int], moved: list[mx.array], rows: mx.array, max_len: int
    ) -> None:
        """Rows `dest` take `moved` (the rows of `row_parts` that replace them, evaluated: a
        lazy gather of the same array would keep MLX from updating its buffer in place); the
        arrays keep their rows and slots (workers/cache_rows.py `keep_in_place`)."""
        if not dest:
            return  # no row moves (and `moved` is empty: zipped, it would drop every part)
        n = len(self.key_parts)
        self.key_parts = [put_rows(p, dest, m) for p, m in zip(self.key_parts, moved[:n])]
        self.value_parts = [put_rows(p, dest, m) for p, m in zip(self.value_parts, moved[n:])]

    def append_rows(
        self, other: RaggedKVCache, num_self: int, num_other: int, capacity: int = 0
    ) -> None:
        self.key_parts = append_parts(
            self.key_parts, other.key_parts, num_self, num_other, capacity
        )
        self.value_parts = append_parts(
            self.value_parts, other.value_parts, num_self, num_other, capacity
        )


class QuantizedRaggedKVCache(RaggedKVCache):
    """A ragged layer cache whose slots are quantized one position at a time (workers/kv_quant);
    attention reads them decoded to floats (the CPU path)."""

    def __init__(self, owner: CacheOwner, quant: KVQuant):
        super().__init__(owner)
        self.quant = quant

    def encode(self, x: mx.array) -> list[mx.array]:
        return self.quant.encode(x)

    def fetch(self, parts: list[mx.array], needed: int) -> Fetched:
        w, scales, biases = (p[: self.owner.num_rows, :, :needed, :] for p in parts)
        return self.quant.decode(w, scales, biases)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Fetched, Fetched]:
        if keys.shape[3] != values.shape[3]:  # head dims differ: keys and values apart
            return super().update_and_fetch(keys, values)
        # Keys and values side by side as heads, [B, 2H, W, D] (keys first): one quantize, one
        # scatter per part and one decode per layer instead of two -- on the CPU each op's
        # fixed cost is a large share of a small model's round. Each slot keeps its own groups.
        H, W = keys.shape[1], keys.shape[2]
        needed = self.owner.window_end(W)
        new = self.encode(mx.concatenate([keys, values], axis=1))
        self.key_parts = self._store(self.key_parts, new, needed, W)
        return self.split(self.key_parts, needed, H)

    def split(self, parts: list[mx.array], needed: int, H: int) -> tuple[Fetched, Fetched]:
        both = self.fetch(parts, needed)  # [B, 2H, S, D]
        assert isinstance(both, mx.array)
        return both[:, :H], both[:, H:]


class PackedReadKVCache(QuantizedRaggedKVCache):
    """The same slots, read packed: `bits` and `group_size` are what mlx-lm's attention looks
    for to use quantized_matmul (the GPU path)."""

    def __init__(self, owner: CacheOwner, quant: KVQuant):
        super().__init__(owner, quant)
        self.bits, self.group_size = quant.bits, quant.group_size

    def fetch(self, parts: list[mx.array], needed: int) -> Fetched:
        return tuple(p[: self.owner.num_rows, :, :needed, :] for p in parts)

    def split(self, parts: list[mx.array], needed: int, H: int) -> tuple[Fetched, Fetched]:
        B = self.owner.num_rows
        return (
            tuple(p[:B, :H, :needed] for p in parts),
            tuple(p[:B, H:, :needed] for p in parts),
        )


def reserve_slots(parts: list[mx.array], new: list[mx.array], needed: int) -> list[mx.array]:
    """Grow each stored part's slot axis to hold `needed` slots (in STEP multiples); `new`
    (the window's encoded parts, [B, H, W, *]) gives the shapes and dtypes of a first one."""
    cap = parts[0].shape[2] if parts else 0
    if needed <= cap:
        return parts
    new_cap = ((needed + STEP - 1) // STEP) * STEP
    grown = []
    for i, n in enumerate(new):
        B, H, _, D = parts[i].shape if parts else n.shape  # the stored rows (spare ones too)
        grow = mx.zeros((B, H, new_cap - cap, D), n.dtype)
        grown.append(mx.concatenate([parts[i], grow], axis=2) if parts else grow)
    return grown


def _write(stored: mx.array, new: mx.array, slots: mx.array) -> mx.array:
    """Scatter the window [B, H, W, D] at each row's own slots [B, 1, W, 1]."""
    return mx.put_along_axis(stored, mx.broadcast_to(slots, new.shape), new, axis=2)
