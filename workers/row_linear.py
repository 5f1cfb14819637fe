"""Linear layers over a few rows as one gemv per row, where a GEMM's launch is the cost.

On MLX CUDA a matmul of one row runs MLX's gemv kernel, of two or more rows a cuBLASLt GEMM
whose launch costs the host ~11 us against ~2-3 us (bench/dispatch_cost.py, H200). A small
model's round is bound by the host (bench/round_split.py): a verify window of 4 tokens, or a
decode step of 8 rows, pays that on every linear layer, which a one-row decode step does not.
`mx.gather_mm` with every row pointing at the one weight runs MLX's gather_mv: the gemv kernel
once per row, in one launch, and each row's result is the one-row matmul's bit for bit (a
verify row computes what the decode step would). Each row reads the whole weight, so only small
weights (read from L2) and few rows take this route (bench/row_matmul.py measures both forms):
a call's rows times its weight's bytes is bounded, so a verify of 40-64 rows keeps the route on
its small layers while a larger lm_head goes back to the GEMM.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from workers.backend import Backend

ROWS_MAX = 64  # rows (tokens in the forward) up to which a layer runs as per-row gemvs
WEIGHT_BYTES_MAX = 2 << 20  # layers whose weight is at most this (2 MiB) take the route
# ... and calls whose rows x weight bytes (what the gemvs read, from L2) are at most this. On the
# H200 (bench/results/row_matmul_h200.json) the route saves the host ~7 us a call at any row
# count, while its device time passes the GEMM's at ~30-35 MB read: 48 MiB is the most the route
# read before this bound (the trained hybrid's 1.5 MiB lm_head at 32 rows). A depth-4 verify of
# 8 rows (40) or a depth-3 one of 16 (64) keeps its 0.6-0.8 MiB layers on the route. On P5
# (trained hybrid, served, in turns against 32 rows alone) it read neutral within the card's
# spread: MTP / plain 1.34 against 1.32 at B = 8, 1.23 against 1.18 at B = 16 (bench/results/s57).
ROW_BYTES_MAX: float = 48 << 20  # float: a benchmark may lift it to inf
# "1" / "0": install the route or not, on any backend (unset: where builds_per_shape;
# Backend.wants).
ENV = "SPECFLEET_ROW_LINEAR"

_indices: dict[int, tuple[mx.array, mx.array]] = {}  # M -> (arange(M), zeros(M)), uint32


def takes(rows: int, weight_bytes: int) -> bool:
    """Whether a call of `rows` rows on a weight of `weight_bytes` runs as per-row gemvs."""
    return 1 < rows <= ROWS_MAX and rows * weight_bytes <= ROW_BYTES_MAX


class ViewLinear(nn.Linear):
    """nn.Linear reading a transposed view of its weight made once, not per call: `x @ w.T`
    adds a Transpose node to every call's graph, a dispatch on the CPU (the default model's
    step calls 71 linears). The same matmul of the same view: the same numbers."""

    def __call__(self, x: mx.array) -> mx.array:
        w = self["weight"]
        wt = held_view(self, "t", w, lambda: w.T)
        if "bias" in self:
            return mx.addmm(self["bias"], x, wt)
        return x @ wt


class ViewEmbedding(nn.Embedding):
    """nn.Embedding whose `as_linear` (a tied lm_head) reads a transposed view made once."""

    def as_linear(self, x: mx.array) -> mx.array:
        w = self["weight"]
        return x @ held_view(self, "t", w, lambda: w.T)


class RowLinear(ViewLinear):
    """nn.Linear without bias whose calls of 2..ROWS_MAX rows (within ROW_BYTES_MAX) run as
    per-row gemvs."""

    def __call__(self, x: mx.array) -> mx.array:
        K = x.shape[-1]
        M = x.size // K
        if not takes(M, self["weight"].nbytes):
            return super().__call__(x)
        if M not in _indices:  # from host data: shared by every engine, whatever its stream
            _indices[M] = (
                mx.array(np.arange(M, dtype=np.uint32)),
                mx.array(np.zeros(M, np.uint32)),
            )
        rows, zero = _indices[M]
        y = mx.gather_mm(
            x.reshape(M, 1, K), self.weight_view(), lhs_indices=rows, rhs_indices=zero
        )  # [M, 1, N]
        return y.reshape(*x.shape[:-1], -1)

    def weight_view(self) -> mx.array:
        """The [1, K, N] view of the weight that gather_mm reads, made once per weight rather
        than as two view ops per call (a verify of a small model calls ~60 linears)."""
        w = self["weight"]
        return held_view(self, "rows", w, lambda: w.T[None])

    def lend_view(self, view: mx.array | None) -> tuple | None:
        """Make `view` the one read for the current weight (a compiled step lends its traced
        weights the views it gets as inputs, so the trace holds no view ops); returns what was
        held, for `restore_view` to put back."""
        held = _held(self)
        old = held.pop("rows", None)
        if view is not None:
            held["rows"] = (self.weight, view)
        return old

    def restore_view(self, old: tuple | None) -> None:
        held = _held(self)
        held.pop("rows", None)
        if old is not None:
            held["rows"] = old


def serves(module: object) -> bool:
    """A small bias-free linear of a width MLX's own gemv takes."""
    return (
        isinstance(module, nn.Linear)
        and type(module) in (nn.Linear, ViewLinear)
        and "bias" not in module
        and module.weight.nbytes <= WEIGHT_BYTES_MAX
        and module.weight.shape[1] % 32 == 0
    )


def install(model: object) -> int:
    """Route `model`'s small bias-free linear layers; returns how many were routed."""
    return reclass(model, serves, RowLinear)


def remove(model: object) -> None:
    """Undo `install` (benchmarks compare both routes in one process)."""
    reclass(model, lambda m: type(m) is RowLinear, engine_linear())


VIEW_ROUTES: dict[type, type] = {nn.Linear: ViewLinear, nn.Embedding: ViewEmbedding}
# "1" / "0": give linears their held views or not (unset: on the CPU, where each graph node is a
# dispatch measured at 2-4 us; on an H200 ten-pass A/Bs of the 6.6B model could not separate
# the views from the card's spread: plain 1.00-1.25x, pipelined forced rounds 0.76-0.97x).
VIEW_ENV = "SPECFLEET_VIEW_LINEAR"


def views_wanted() -> bool:
    backend = Backend.current()
    return backend.wants(VIEW_ENV, default=backend.computes_in_launch)


def engine_linear() -> type:
    """The class an engine gives a plain linear: what a route's `remove` gives back."""
    return ViewLinear if views_wanted() else nn.Linear


def install_views(model: object) -> int:
    """Give `model`'s remaining plain linear layers (and a tied lm_head's embedding) their held
    transposed view (where VIEW_ENV says; Backend.wants)."""
    if not views_wanted():
        return 0
    changed = 0
    for base, route in VIEW_ROUTES.items():
        changed += reclass(model, lambda m, b=base: type(m) is b, route)  # type: ignore[misc]
    return changed


def held_view(
    module: object, key: object, source: mx.array, make: Callable[[], mx.array], keep: int = 8
) -> mx.array:
    """`make()`, a view of `source` (a module's weight), made once and held on the module outside
    its parameters: later calls reuse it, evaluated, so it costs no graph node. A replaced
    weight (or a compile trace's stand-in) gets its own; at most `keep` keys are held."""
    held = _held(module)
    entry = held.get(key)
    if entry is None or entry[0] is not source:
        # Each dict call below is one atomic step under the GIL, so two threads on one module
        # at worst both make a view, never fail on a key the other already dropped.
        for oldest in list(held)[: max(0, len(held) - keep + 1)]:
            held.pop(oldest, None)
        entry = held[key] = (source, make())
    return entry[1]


def remove_views(model: object) -> None:
    """Undo `install_views` (benchmarks compare both in one process)."""
    for base, route in VIEW_ROUTES.items():
        reclass(model, lambda m, r=route: type(m) is r, base)  # type: ignore[misc]


def _held(module: object) -> dict:
    """The module's held views, key -> (source, view), kept outside its parameters."""
    # Not a parameter: straight into the instance dict, past Module's setattr (setdefault: one
    # atomic step, so two threads never hold different dicts).
    return module.__dict__.setdefault("_held", {})


def reclass(model: object, takes: Callable[[object], bool], cls: type) -> int:
    """Give every module of `model` that `takes` accepts the class `cls` (same parameters, the
    other call: how a route is installed or undone); returns how many."""
    changed = 0
    for _, module in model.named_modules():  # type: ignore[attr-defined]
        if takes(module):
            module.__class__ = cls
            changed += 1
    return changed
