"""Fewer graph nodes per forward on MLX's CPU backend, with the same numbers.

MLX's CPU backend has no kernels for `mx.fast.rope` and `mx.fast.rms_norm`: each call expands
into the op graph MLX falls back to (mlx/fast.cpp), 31 nodes for a RoPE and 11 for an RMSNorm,
and every node is a task the CPU queue dispatches for ~2-4 us whatever its size (a chain of
adds on [1, 256] costs 3.5 us a node on the 2-core CI VM). A one-token step of the default
model (10 layers) builds ~1,590 nodes: 620 of them in its 20 RoPE calls, 451 in its 41 norms.
The step is bound by those dispatches, not by arithmetic.

These routes compute what the fallbacks compute, op for op, so every output is the fallback's bit
for bit (tests/workers/engine/test_cpu_ops.py), and build fewer nodes:
- `TableRoPE`: the cosines and sines depend on the positions only, which every layer of one
  forward shares (the cache's `offset` is one array object per forward). They are made once per
  forward by MLX's own fallback, run on a probe whose first half is ones and second half zeros
  (its outputs are then exactly the fallback's cos and sin), and broadcast once per head count.
  A call then costs 6 nodes (two slices and a concatenation rotating the halves, two products,
  a sum; 9 under partial rotation).
- `ViewRMSNorm`: the fallback broadcasts its two scalars (1/n and eps) and the weight on every
  call; here they are broadcast once per shape and kept (an evaluated broadcast is a view, no
  node): 8 nodes.
Only where MLX runs these fallbacks (the CPU) and on float32 arrays (the CPU's dtype): a GPU
runs each fast op as one kernel, and other dtypes keep MLX's own path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import mlx.core as mx
import mlx.nn as nn

from workers.attention_route import route_attention
from workers.backend import Backend
from workers.row_linear import held_view, reclass

# "1" / "0": install the routes or not, on any backend (unset: where MLX computes in launch, the
# CPU; Backend.wants).
ENV = "SPECFLEET_CPU_OPS"
KEPT_SHAPES = 8  # shapes each table keeps (they change with batch size and window); FIFO
R = TypeVar("R")


class _Memo(threading.local):
    """Per thread (an engine's forward runs on one; MLX streams are per thread too): what one
    forward shares across its layers, per kind ("rope", "mask"), keyed by the object the model
    passes every layer (the cache's `offset`, the mask) and held, so its identity cannot be
    reused while the arrays made from it live; and the probes and broadcast scalars by shape."""

    def __init__(self) -> None:
        self.anchors: dict[str, tuple[object, dict[tuple, Any]]] = {}
        self.probes: OrderedDict[tuple, Any] = OrderedDict()
        self.scalars: OrderedDict[tuple, Any] = OrderedDict()

    def per_forward(self, kind: str, anchor: object, key: tuple, make: Callable[[], R]) -> R:
        held, made = self.anchors.get(kind, (None, {}))
        if isinstance(anchor, int):
            same = isinstance(held, int) and anchor == held
        else:
            same = anchor is held
        if not same:
            made = {}
            self.anchors[kind] = (anchor, made)
        if key not in made:
            if len(made) >= 4 * KEPT_SHAPES:  # an int anchor never changes in a cacheless loop
                made.clear()
            made[key] = make()
        return made[key]  # type: ignore[return-value]


_memo = _Memo()


def _kept(table: OrderedDict[tuple, Any], key: tuple, make: Callable[[], R], size: int) -> R:
    value: R | None = table.get(key)
    if value is None:
        value = table[key] = make()
        while len(table) > size:
            table.popitem(last=False)
    return value


def _probe(B: int, T: int, dims: int, dtype: mx.Dtype) -> mx.array:
    """[B, 1, T, dims]: ones in the first half of the last axis, zeros in the second."""

    def make() -> mx.array:
        half = mx.concatenate([mx.ones((dims // 2,), dtype), mx.zeros((dims // 2,), dtype)])
        return mx.broadcast_to(half, (B, 1, T, dims))

    return _kept(_memo.probes, (B, T, dims, dtype), make, KEPT_SHAPES)


class TableRoPE(nn.RoPE):
    """nn.RoPE whose cos/sin tables are made once per forward for every layer."""

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        if self.traditional or x.ndim != 4 or x.dtype != mx.float32 or not on_cpu():
            return super().__call__(x, offset)  # type: ignore[arg-type]
        B, N, T, _ = x.shape
        half = self.dims // 2
        rotated = _memo.per_forward(
            "rope",
            offset,
            (B, T, self.dims, self.base, self.scale),
            lambda: self._rotated(B, T, offset),
        )
        x1, x2 = x[..., :half], x[..., half : self.dims]
        if self.dims == x.shape[-1]:
            # The fallback's [x1*cos - x2*sin, x1*sin + x2*cos] as x*[cos, cos] + [x2, x1]*[-sin,
            # sin]: a - b is a + (-b) and x*(-s) is -(x*s) in IEEE arithmetic, and a sum's order
            # does not change it, so every element is the fallback's bit for bit; 6 nodes, not 9.
            both, signed = _memo.per_forward(
                "rope", offset, (B, N, T, self.dims, self.base, self.scale),
                lambda: _whole_tables(rotated, half, (B, N, T, 2 * half)),
            )  # fmt: skip
            return x * both + mx.concatenate([x2, x1], axis=-1) * signed
        cos, sin = _memo.per_forward(
            "rope", offset, (B, N, T, self.dims, self.base, self.scale, "part"),
            lambda: (mx.broadcast_to(rotated[..., :half], (B, N, T, half)),
                     mx.broadcast_to(rotated[..., half:], (B, N, T, half))),
        )  # fmt: skip
        # The fallback's arithmetic, in its order (mlx/fast.cpp, rope, forward).
        parts = [x1 * cos - x2 * sin, x1 * sin + x2 * cos, x[..., self.dims :]]
        return mx.concatenate(parts, axis=-1)

    def _rotated(self, B: int, T: int, offset: int | mx.array) -> mx.array:
        """[B, 1, T, dims]: cos then sin of every position, by MLX's own fallback: rotating
        (1, 0) pairs gives (1*cos - 0*sin, 1*sin + 0*cos), exactly cos and sin."""
        return super().__call__(_probe(B, T, self.dims, mx.float32), offset)  # type: ignore[arg-type]


def _whole_tables(rotated: mx.array, half: int, shape: tuple) -> tuple[mx.array, mx.array]:
    """([cos, cos], [-sin, sin]) broadcast to `shape`, from rotated [B, 1, T, 2*half]."""
    cos, sin = rotated[..., :half], rotated[..., half:]
    return (
        mx.broadcast_to(mx.concatenate([cos, cos], axis=-1), shape),
        mx.broadcast_to(mx.concatenate([-sin, sin], axis=-1), shape),
    )


class ViewRMSNorm(nn.RMSNorm):
    """nn.RMSNorm with its scalars and weight broadcast once per shape."""

    def __call__(self, x: mx.array) -> mx.array:
        w = self["weight"]
        if x.dtype != mx.float32 or w.dtype != mx.float32 or not on_cpu():
            return super().__call__(x)
        inv_n, eps = _scalars(x.shape, self.eps)  # [..., 1] each
        weight = held_view(self, ("w", x.shape), w, lambda: mx.broadcast_to(w, x.shape))
        # The fallback's arithmetic, in its order (mlx/fast.cpp, rms_norm): mean is the sum
        # times 1/n (mlx/ops.cpp, mean), the eps added in float32.
        r = mx.rsqrt(mx.sum(mx.square(x), axis=-1, keepdims=True) * inv_n + eps)
        return (x * r) * weight


def _scalars(shape: tuple[int, ...], eps: float) -> tuple[mx.array, mx.array]:
    """1/n and eps as the fallback makes them (float32 scalars), broadcast to [..., 1]."""
    lead = (*shape[:-1], 1)

    def make() -> tuple[mx.array, mx.array]:
        return (
            mx.broadcast_to(mx.array(1.0 / shape[-1], dtype=mx.float32), lead),
            mx.broadcast_to(mx.array(eps, dtype=mx.float32), lead),
        )

    return _kept(_memo.scalars, (shape, eps), make, 4 * KEPT_SHAPES)


ROUTES: dict[type, type] = {nn.RoPE: TableRoPE, nn.RMSNorm: ViewRMSNorm}


def wanted() -> bool:
    """Where MLX runs these fallbacks, the CPU, unless ENV is "0". Never on a GPU, whose
    kernels round differently from the fallbacks these routes reproduce."""
    backend = Backend.current()
    return on_cpu() and backend.wants(ENV, default=backend.computes_in_launch)


def on_cpu() -> bool:
    """The routes' own guard at every call: a model routed while the default device was the
    CPU keeps MLX's own ops if it later runs on a GPU."""
    return mx.default_device() == mx.cpu


def install(model: object) -> int:
    """Route `model`'s RoPE and RMSNorm modules; returns how many."""
    changed = 0
    for base, route in ROUTES.items():
        changed += reclass(model, lambda m, b=base: type(m) is b, route)  # type: ignore[misc]
    return changed


def remove(model: object) -> None:
    """Undo `install`."""
    for base, route in ROUTES.items():
        reclass(model, lambda m, r=route: type(m) is r, base)  # type: ignore[misc]


# -- attention ------------------------------------------------------------------------------------
def install_attention(model: object) -> None:
    """Route `model`'s attention through `attention` where the call comes from a ragged cache
    whose owner asks for it (BatchCache.cpu_attention): mlx-lm imports
    `scaled_dot_product_attention` by name into each model file, so it is replaced there (as
    workers/attention_cuda.py does); every other call goes to mlx-lm's own function."""
    route_attention(model, _attention_router, "_cpu_route")


def _attention_router(original: Callable[..., mx.array]) -> Callable[..., mx.array]:
    def route(queries, keys, values, cache, scale, mask, sinks=None):  # type: ignore[no-untyped-def]
        owner = getattr(cache, "owner", None)
        if (
            getattr(owner, "cpu_attention", False)
            and on_cpu()
            and sinks is None
            and not hasattr(cache, "bits")
            and isinstance(keys, mx.array)
            and queries.dtype == keys.dtype == values.dtype == mx.float32
            and (mask is None or (isinstance(mask, mx.array) and mask.dtype == mx.bool_))
        ):
            return attention(queries, keys, values, scale, mask)
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    return route


def attention(
    q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None
) -> mx.array:
    """MLX's attention fallback (mlx/fast.cpp, scaled_dot_product_attention) op for op, q
    [B, Hq, L, D], k and v [B, Hk, S, D], mask bool [..., L, S] or None: the scale's broadcast
    kept per shape, and the mask's broadcast, head split and fill value made once per forward
    for every layer (the model passes them all one mask object)."""
    B, Hq, L, _ = q.shape
    Hk, S = k.shape[1], k.shape[2]
    rep = Hq // Hk
    scaled = _kept(_memo.scalars, ("scale", q.shape, scale),
                   lambda: mx.broadcast_to(mx.array(scale, dtype=q.dtype), q.shape), 4 * KEPT_SHAPES)  # fmt: skip
    q = scaled * q  # the fallback's order: scale times q
    if rep > 1:
        q = mx.unflatten(q, 1, (Hk, rep))  # [B, Hk, rep, L, D]
        k, v = mx.expand_dims(k, 2), mx.expand_dims(v, 2)
    scores = q @ mx.swapaxes(k, -1, -2)
    if mask is not None:
        keep, lowest = _memo.per_forward("mask", mask, (scores.shape, rep),
                                         lambda: _mask_for(mask, (B, Hq, L, S), Hk, rep, scores.shape))  # fmt: skip
        scores = mx.where(keep, scores, lowest)
    out = softmax(scores) @ v
    return mx.flatten(out, 1, 2) if rep > 1 else out


# Scores a softmax takes apart (`softmax`) from: below, the 3 extra nodes cost more than the
# exponentials they speed up (~3-5 us a node against ~10 ns an element saved).
SOFTMAX_SPLIT_ELEMENTS = 2048


_traces = 0  # times `_shifted_exp` was traced (tests: once, not once per shape)


@partial(mx.compile, shapeless=True)  # one trace for every shape: keys grow by one a step
def _shifted_exp(x: mx.array, top: mx.array) -> mx.array:
    global _traces
    _traces += 1  # runs only while MLX traces
    return mx.exp(x - top)


def softmax(x: mx.array) -> mx.array:
    """`mx.softmax(x, axis=-1, precise=True)` of float32 scores, bit for bit, in MLX's CPU
    kernel's own steps: the row's max, exp of the shifted scores, their sum, times the sum's
    reciprocal. The exponentials run as one compiled kernel, which workers/cpu_jit.py builds
    with the CPU's FMA units: MLX's own kernel (the wheel's baseline x86 build) calls libm's
    `fmaf` in each exp's polynomial. [16, 4, 120, 120] (a 16-prompt prefill's layer): 14.2 ms
    against 5.0 (2-core CPU VM, bench/results/s47/README.md). Equal bits checked across shapes,
    masked and fully masked rows (tests/workers/engine/test_cpu_ops.py)."""
    if x.size < SOFTMAX_SPLIT_ELEMENTS:
        return mx.softmax(x, axis=-1, precise=True)
    e = _shifted_exp(x, mx.max(x, axis=-1, keepdims=True))
    return e * (1.0 / mx.sum(e, axis=-1, keepdims=True))


def _mask_for(
    mask: mx.array, shape: tuple, Hk: int, rep: int, scores: tuple
) -> tuple[mx.array, mx.array]:
    keep = mx.broadcast_to(mask, shape)  # what MLX hands its fallback
    if rep > 1:
        keep = mx.unflatten(keep, -3, (Hk, rep))
    lowest = mx.broadcast_to(mx.array(mx.finfo(mx.float32).min, dtype=mx.float32), scores)
    return keep, lowest
