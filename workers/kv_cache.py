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

Membership (`row_capacity`, the engine's running cache). Rows join and leave in place, at the
cost of the rows that move, not of the batch (workers/cache_rows.py): the arrays keep spare
rows after the batch's B; attention reads the first B, a window's write pads the rest.

Quantized slots (`quant`, EngineConfig.kv_bits): each window's keys and values are quantized
once, one position at a time, before they are written (workers/kv_quant.py says why that keeps
speculative output equal to plain output); attention reads the slots packed (Metal) or decoded to
floats (CPU, CUDA), the same way in every window. Compaction, joins,
row removal and rollback move lengths and whole slots, so they work on packed parts unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from workers import attention_cuda, cpu_ops
from workers.backend import Backend
from workers.cache_rows import append_parts, put_rows, spare_slots
from workers.cache_types import CacheOwner, LayerCache
from workers.hybrid import RaggedStateCache, install
from workers.kv_quant import KVQuant

STEP = 256  # grow the slot axis in multiples of this, as mlx-lm's KVCache does
SPAN = 128  # where shapes cost graph builds, attention reads spans rounded up to this


# What a layer hands mlx-lm's attention: keys/values [B, H, S, D], or for a quantized cache
# (packed [B, H, S, D*bits/32], scales [B, H, S, D/g], biases [B, H, S, D/g]).
Fetched = mx.array | tuple[mx.array, ...]


class RaggedKVCache:
    """One attention layer's cache; the duck type mlx-lm attention expects.

    mlx-lm layers call `rope(x, offset=cache.offset)` then `cache.update_and_fetch(k, v)`;
    the model calls `cache.make_mask(N)` through `create_attention_mask`. Keys and values are
    stored as lists of parts that all share the [B, H, S_cap, *] layout (one part here, three
    in QuantizedRaggedKVCache), so every storage operation works part by part along the slot
    axis.
    """

    def __init__(self, owner: CacheOwner):
        self.owner = owner
        self.key_parts: list[mx.array] = []  # each [B, H, S_cap, *]
        self.value_parts: list[mx.array] = []

    @property
    def keys(self) -> mx.array | None:
        return self.key_parts[0] if self.key_parts else None  # [B, H, S_cap, Dk]

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
        cap = max(STEP, ((max_len + STEP - 1) // STEP) * STEP)
        self.key_parts = [p[rows, :, :cap] for p in self.key_parts]
        self.value_parts = [p[rows, :, :cap] for p in self.value_parts]

    def place_rows(self, dest: list[int], moved: list[mx.array]) -> None:
        """Rows `dest` take `moved` (this layer's parts' rows that replace them,
        keys' then values', evaluated: a lazy gather of the same array would keep MLX from
        updating its buffer in place); the array keeps its rows (`BatchCache.keep_rows`)."""
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


class BatchCache:
    """All layers' ragged caches of one model plus the per-row committed lengths."""

    def __init__(
        self,
        recurrent: Sequence[bool],
        num_rows: int = 0,
        quant: KVQuant | None = None,
        row_capacity: int = 0,
    ):
        self.recurrent = list(recurrent)
        self.quant = quant  # None: slots hold the model's dtype; else quantized per slot
        # Rows the attention layers' arrays may keep for joiners, so that rows join and leave in
        # place (workers/cache_rows.py); 0: exactly the batch's rows, concatenated and gathered.
        self.row_capacity = row_capacity
        # Tokens of KV the arrays may hold (the engine's admission budget; 0: unbounded):
        # spare rows are grown only as far as it allows, a row's slots times the rows.
        self.slot_budget = 0
        # [B] committed tokens per row: exact on the device (lengths_mx); on the host exact
        # after host commits, an upper bound after `commit_lazy` (a round still in flight).
        self.lengths = np.zeros(num_rows, dtype=np.int64)
        # Whether the host's lengths equal the device's (no lazy commit left an upper bound).
        self.exact = True
        self.layers: list[LayerCache] = [self._layer(rec) for rec in self.recurrent]
        self.window_valid = np.zeros(num_rows, dtype=np.int64)  # [B] real tokens in the window
        # Arrays every layer of one forward or one commit needs (window slots, the kept-prefix
        # mask, ...), built once instead of once per layer: on a GPU each op is a launch the
        # host pays for. Emptied before each forward and each commit.
        self._shared: dict[tuple, mx.array] = {}
        # Attention span granularity: SPAN where each new shape is a graph build (MLX CUDA),
        # else exact. A stale slot still costs its score's exp, which MLX's x86 CPU backend
        # computes at ~12 ns each: spans of 128 made a 140-token prompt's prefill attend 256
        # slots, and a B=16 decode step ~1.4 ms dearer (2-core CPU, default model).
        self.span = SPAN if Backend.current().builds_per_shape else 1
        # Steps `attention_cuda.serves` accepts (one token; a short window over few slots)
        # attend through that kernel on MLX CUDA, with the rows' lengths instead of the mask;
        # off for a model with sliding-window layers.
        self.kernel_attention = Backend.current().builds_per_shape
        # Attention as MLX's CPU fallback with fewer graph nodes (workers/cpu_ops.py).
        self.cpu_attention = cpu_ops.wanted()
        self._refresh()

    @classmethod
    def for_model(
        cls,
        model: object,
        num_rows: int = 0,
        quant: KVQuant | None = None,
        row_capacity: int = 0,
    ) -> BatchCache:
        return cls(layer_kinds(model), num_rows, quant, row_capacity)

    def _layer(self, recurrent: bool) -> LayerCache:
        if recurrent:
            return RaggedStateCache(self)
        if self.quant is None:
            return RaggedKVCache(self)
        if self.quant.read_packed:
            return PackedReadKVCache(self, self.quant)
        return QuantizedRaggedKVCache(self, self.quant)

    @property
    def num_rows(self) -> int:
        return int(self.lengths.shape[0])

    def _refresh(self) -> None:
        # lengths_mx is replaced, never updated in place (no `+=` on it): RoPE tables are kept per
        # forward by this object's identity (workers/cpu_ops.py), as are the window's arrays.
        self.lengths_mx = mx.array(self.lengths.astype(np.int32))

    def set_window_valid(self, valid: np.ndarray) -> None:
        """How many of the next window's tokens are real per row (the rest is padding)."""
        self.window_valid = np.asarray(valid, dtype=np.int64)
        self.window_valid_mx = mx.array(self.window_valid.astype(np.int32))
        self._shared = {}

    # -- window geometry (shared by every layer in one forward) ------------------------------
    def window_end(self, W: int) -> int:
        """Slots attention reads for a W-token window, rounded up to a multiple of `span`.

        Rounding (SPAN, MLX CUDA) keeps attention shapes the same across many rounds, so backends that build
        kernels or graphs per shape (MLX's CUDA SDPA: ~40 ms per new shape on an H200) reuse
        them; the extra slots are stale and masked like any other. A lone row's one-token step
        reads exactly its slots (`reads_exact_row`), as mlx-lm's own decode does.
        """
        end = int(self.lengths.max(initial=0)) + W
        if self.reads_exact_row(W):
            return end
        return ((end + self.span - 1) // self.span) * self.span

    def reads_exact_row(self, W: int) -> bool:
        """A one-token step of a lone row whose host length is exact: attention reads exactly
        its valid slots, so it needs no mask. Unmasked, attention takes the kernels mlx-lm's
        decode takes: MLX CUDA's vector SDPA refuses array masks (H200, plain B=1: 1.41-1.59x
        faster). On this project's 2-core CPU the mask was 5% of a synced step of the default
        model, hidden in the pipelined engine (no gain measured there)."""
        return W == 1 and self.num_rows == 1 and self.exact and int(self.window_valid[0]) == 1

    def window_slots(self, W: int) -> mx.array:
        """[B, 1, W, 1] each window token's slot; built once per forward, not once per layer
        (on a GPU every op is a kernel launch the host pays for)."""
        return self.shared(
            ("slots", W), lambda: (self.lengths_mx[:, None] + mx.arange(W)[None])[:, None, :, None]
        )

    def shared(self, key: tuple, make: Callable[[], mx.array]) -> mx.array:
        """`make()`, built once per forward (or per commit) for every layer that asks by `key`."""
        value = self._shared.get(key)
        if value is None:
            value = self._shared[key] = make()
        return value

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
        self._shared = {}
        self.lengths = self.lengths + n
        for layer in self.layers:
            layer.on_commit(n)
        self.lengths_mx = self.lengths_mx + mx.array(n.astype(np.int32))

    def commit_lazy(self, num_new: mx.array, most: int, all_most: bool = False) -> None:
        """`commit` with counts still on the device ([B] int32, each <= `most`): no host sync.

        The device lengths are exact; the host's become upper bounds (+most per row), which is
        all the host needs them for (attention span, slot capacity), until `tighten` narrows
        them again from what the host learns later. Recurrent layers pick each row's state after
        its own count on the device (verify windows keep every position's state). `all_most`:
        every row commits exactly `most` (a plain round), so exact host lengths stay exact.
        """
        self.exact = self.exact and all_most
        self._shared = {}
        self.lengths = self.lengths + most
        for layer in self.layers:
            layer.on_commit(num_new, whole=all_most)
        self.lengths_mx = self.lengths_mx + num_new.astype(mx.int32)

    def tighten(self, bounds: np.ndarray, rows: np.ndarray, exact: bool = False) -> None:
        """Narrow the host's upper bounds to `bounds` [B] where `rows` [B] bool is set.
        `exact`: the bounds are every row's exact length (`rows` all set)."""
        # A masked assignment, not np.where: inside the engine's round np.where on these [B]
        # arrays took 115-135 us per call (1.7 us alone), a masked assignment 1-13 us.
        lengths = self.lengths.copy()
        lengths[rows] = np.minimum(lengths[rows], np.asarray(bounds)[rows])
        self.lengths = lengths
        self.exact = self.exact or (exact and bool(np.all(rows)))

    def rollback(self, num_drop: Sequence[int] | np.ndarray) -> None:
        """Forget the last num_drop[r] committed tokens of each row (drafter caches)."""
        if any(self.recurrent):
            raise ValueError("recurrent layers cannot roll back; use them only in targets")
        d = np.asarray(num_drop, dtype=np.int64)
        assert d.shape == self.lengths.shape and (d >= 0).all() and (d <= self.lengths).all()
        self.lengths = self.lengths - d
        self.lengths_mx = self.lengths_mx - mx.array(d.astype(np.int32))

    def reset_rows(self, rows: np.ndarray) -> None:
        """Empty the rows where `rows` [B] bool is set (drafter caches restarting a row)."""
        if any(self.recurrent):
            raise ValueError("recurrent layers cannot be reset; use them only in targets")
        self.lengths = np.where(rows, 0, self.lengths)
        self.lengths_mx = mx.where(mx.array(rows), 0, self.lengths_mx)

    # -- membership --------------------------------------------------------------------------
    def keep_rows(self, keep: Sequence[int]) -> None:
        """Keep only the rows `keep` (old row indices), in that order: row i becomes old row
        keep[i]. With `row_capacity`, an order of `fill_holes`' form moves only the rows that
        fill holes, in place; any other order gathers every row."""
        keep_idx = list(keep)
        # The window array describes the last forward, which may predate rows that joined since
        # (a round that drafted nothing runs no draft forward): index it one entry per row.
        window = self._window_rows()
        self.lengths = self.lengths[keep_idx] if keep_idx else np.zeros(0, dtype=np.int64)
        rows = mx.array(np.asarray(keep_idx, dtype=np.int32))
        max_len = int(self.lengths.max(initial=0))
        in_place = self._moves(keep_idx, max_len)
        if keep_idx and in_place is not None:
            dest, src = in_place
            kv = [x for x in self.layers if isinstance(x, RaggedKVCache) and x.key_parts]
            if dest:
                moved = [[p[src] for p in x.key_parts + x.value_parts] for x in kv]
                mx.eval(moved)  # see RaggedKVCache.place_rows
                for kv_layer, rows_moved in zip(kv, moved):
                    kv_layer.place_rows(dest, rows_moved)
            for layer in self.layers:
                if not isinstance(layer, RaggedKVCache):
                    layer.take_rows(rows, max_len)
        elif keep_idx:
            for layer in self.layers:
                layer.take_rows(rows, max_len)
        else:
            self.layers = [self._layer(rec) for rec in self.recurrent]
        self.window_valid = window[keep_idx] if keep_idx else self.lengths.copy()
        # The device lengths may be ahead of the host's bounds (a round in flight): gather them.
        self.lengths_mx = self.lengths_mx[rows] if keep_idx else mx.zeros(0, dtype=mx.int32)

    def _moves(self, keep: list[int], max_len: int) -> tuple[list[int], mx.array] | None:
        """(dest, src: [n] int32) where `keep` only moves rows from past its end into holes
        before it (`fill_holes`), the arrays keep spare rows (`row_capacity`), at least half
        their rows stay and no layer's slots would shrink (a gather trims them to the rows
        left, bounding the memory spare rows and slots hold); else None."""
        if not self.row_capacity:
            return None
        n = len(keep)
        held = [parts[0].shape[0] for x in self.layers if (parts := _kv_parts(x))]
        if held and 2 * n < held[0]:
            return None  # fewer than half the rows left: gathered, the arrays shrink to them
        dest = [i for i, j in enumerate(keep) if j != i]
        if any(keep[i] < n for i in dest):
            return None  # a permutation of kept rows: gathered
        cap = max(STEP, ((max_len + STEP - 1) // STEP) * STEP)
        if any(parts[0].shape[2] != cap for x in self.layers if (parts := _kv_parts(x))):
            return None
        return dest, mx.array(np.array([keep[i] for i in dest], dtype=np.int32))

    def append(self, other: BatchCache) -> None:
        """Append other's rows after ours (new requests joining a running batch)."""
        assert other.recurrent == self.recurrent and other.quant == self.quant
        capacity = self.row_capacity
        slots = max((p.shape[2] for x in (*self.layers, *other.layers) for p in _kv_parts(x)[:1]),
                    default=0)  # fmt: skip
        if capacity and self.slot_budget and slots:
            rows = self.num_rows + other.num_rows
            capacity = min(capacity, max(rows, self.slot_budget // slots))
        for mine, theirs in zip(self.layers, other.layers):
            mine.append_rows(theirs, self.num_rows, other.num_rows, capacity)
        self.exact = self.exact and other.exact
        self.kernel_attention = self.kernel_attention and other.kernel_attention
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


def _kv_parts(layer: LayerCache) -> list[mx.array]:
    """An attention layer's key parts (none yet, or a recurrent layer: [])."""
    return layer.key_parts if isinstance(layer, RaggedKVCache) else []


def layer_kinds(model: object) -> list[bool]:
    """Which layers are recurrent; fail early, naming the cache type, for unsupported ones."""
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    recurrent = install(model)
    if Backend.current().builds_per_shape:
        attention_cuda.install(model)
    if cpu_ops.wanted():
        cpu_ops.install_attention(model)
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
