"""What the ragged batch cache's layers and their owner promise each other.

`workers/kv_cache.py` (the `BatchCache` owner), `workers/kv_layers.py` (attention layers),
`workers/hybrid.py` (recurrent layers) and `workers/cache_rows.py` (rows joining and leaving) all
build on these, so the layers and the owner talk through this module, not each other's:
kv_cache imports the layers' modules to build them, hybrid imports only this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import mlx.core as mx
import numpy as np


class CacheOwner(Protocol):
    """The per-row bookkeeping one `BatchCache` shares with all of its layers."""

    lengths: np.ndarray  # [B] host upper bounds of the committed tokens per row

    @property
    def num_rows(self) -> int: ...  # B: a layer's arrays may hold more (cache_rows.py's spare rows)

    lengths_mx: mx.array  # [B] int32, exact committed tokens per row (device)
    window_valid: np.ndarray  # [B] real tokens in the current window (the rest is padding)
    window_valid_mx: mx.array  # [B] int32, the same on the device
    kernel_attention: bool  # steps may attend by row length (workers/attention_cuda.py)

    def window_end(self, W: int) -> int: ...

    def window_slots(self, W: int) -> mx.array: ...

    # one array per forward or commit, whichever layer asks first builds it
    def shared(self, key: tuple, make: Callable[[], mx.array]) -> mx.array: ...

    def window_mask(self, W: int, window_size: int | None = None) -> mx.array: ...

    def reads_exact_row(self, W: int) -> bool: ...


class LayerCache(Protocol):
    """One layer's share of a ragged batch cache: what `BatchCache` calls on each layer."""

    def make_mask(self, N: int, **kwargs: Any) -> mx.array | None: ...

    # whole: every row keeps the whole window (n == W everywhere), a plain decode step
    def on_commit(self, n: np.ndarray | mx.array, whole: bool = False) -> None: ...

    def take_rows(self, rows: mx.array, max_len: int) -> None: ...

    # the arrays whose rows move in place, [R, ...] with R >= B spare rows ([]: none, gathered)
    def row_parts(self) -> list[mx.array]: ...

    # rows `dest` take `moved` (rows of row_parts, evaluated); a layer without row_parts keeps
    # `rows` (old indices) as take_rows does (workers/cache_rows.py `keep_in_place`)
    def place_rows(
        self, dest: list[int], moved: list[mx.array], rows: mx.array, max_len: int
    ) -> None: ...

    # `other` is a layer of the same kind (each implementation names its own type); `capacity`:
    # rows the arrays may keep for later joiners (0: exactly the batch's)
    def append_rows(self, other: Any, num_self: int, num_other: int, capacity: int = 0) -> None: ...

    def arrays(self) -> list[mx.array]: ...


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
