"""Ragged per-row KV cache: every row's tokens sit at contiguous positions [0, length_r).

`BatchCache` owns the per-row committed lengths for all layers of one model, so the layers can
never disagree about where a row ends; each layer stores its own slots (attention:
workers/kv_layers.py, recurrent: workers/hybrid.py). Row r's committed tokens occupy slots
[0, length_r): there is no left padding and there are no holes.

Compaction. After verify the row keeps only its first n_r window tokens (the accepted prefix):
`commit(n)` sets length_r += n_r. The accepted tokens are already at their final slots, the
rejected tail lies beyond the new length and is overwritten by the next window. Its cost is
O(B), the window's write is O(B·W): neither grows with the context (mlx-vlm rolls the whole
sequence axis of every layer each round; mlxcel moves the window down after writing it at a
shared offset).

Membership (`row_capacity`, the engine's running cache). Rows join and leave in place, at the
cost of the rows that move, not of the batch (workers/cache_rows.py): the arrays keep spare
rows after the batch's B; attention reads the first B, a window's write pads the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from workers import attention_cuda, cpu_ops
from workers.backend import Backend
from workers.cache_rows import join_capacity, keep_in_place
from workers.cache_types import LayerCache
from workers.hybrid import RaggedStateCache, install
from workers.kv_layers import (
    PackedReadKVCache,
    QuantizedRaggedKVCache,
    RaggedKVCache,
    slot_capacity,
)
from workers.kv_quant import KVQuant

SPAN = 128  # where shapes cost graph builds, attention reads spans rounded up to this


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
        fill holes, in place (workers/cache_rows.py); any other order gathers every row."""
        keep_idx = list(keep)
        # The window array describes the last forward, which may predate rows that joined since
        # (a round that drafted nothing runs no draft forward): index it one entry per row.
        window = self._window_rows()
        self.lengths = self.lengths[keep_idx] if keep_idx else np.zeros(0, dtype=np.int64)
        rows = mx.array(np.asarray(keep_idx, dtype=np.int32))
        max_len = int(self.lengths.max(initial=0))
        if not keep_idx:
            self.layers = [self._layer(rec) for rec in self.recurrent]
        elif not (
            self.row_capacity
            and keep_in_place(self.layers, keep_idx, rows, max_len, slot_capacity(max_len))
        ):
            for layer in self.layers:
                layer.take_rows(rows, max_len)
        self.window_valid = window[keep_idx] if keep_idx else self.lengths.copy()
        # The device lengths may be ahead of the host's bounds (a round in flight): gather them.
        self.lengths_mx = self.lengths_mx[rows] if keep_idx else mx.zeros(0, dtype=mx.int32)

    def append(self, other: BatchCache) -> None:
        """Append other's rows after ours (new requests joining a running batch)."""
        assert other.recurrent == self.recurrent and other.quant == self.quant
        rows = self.num_rows + other.num_rows
        capacity = join_capacity(
            [*self.layers, *other.layers], rows, self.row_capacity, self.slot_budget
        )
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
