"""An attention layer's q, k and v projections as one matmul over their stacked weights (MLX
CUDA), where three calls each stream too little to reach the card's bandwidth.

mlx-lm's attention calls `q_proj(x)`, `k_proj(x)`, `v_proj(x)`. On an H200 a ~6B Qwen3 layer's
three bf16 projections (32 + 16 + 16 MiB) took 32-35 us as three gemvs at one row and 64 us as
three skinny-kernel calls at five (workers/skinny_linear.py), 90-93 us as three GEMMs at 16-40
rows; one matmul over the stacked 64 MiB weight took 21.5 / 32 / 31 us (~1B: 24-30 against
12 us at one row, 51 against 24 at five, 76-78 against 28 at 40 rows; queued calls, weights
streamed from HBM; bench/results/s63/device/fused_qkv_gpu.py). A layer saves that at every
forward: decode steps, verify windows and prefill chunks alike.

The route installs once per model: the three weights become row slices (views, no copy) of one
stacked weight, so the model holds no second copy; `q_proj` runs the stacked matmul, returns
q's columns and keeps k's and v's for the `k_proj` and `v_proj` calls that follow on the same
x. Any other call (another x, or a weight replaced since) runs the layer's own matmul. A
column's value is a dot product of x with one weight row either way; at one row both are MLX's
gemv and bit for bit the same, at more rows the GEMM's tiling (and so the rounding) may differ,
as it already does between row counts, which the engine's parity tests allow for (near ties).

Default where launches and shapes cost the most (MLX CUDA: Backend.wants); `SPECFLEET_FUSED_QKV`
"1" / "0" installs it or not on any backend. Stacks of at most row_linear's WEIGHT_BYTES_MAX
(small models) keep row_linear's per-row gemvs instead.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from workers import row_linear
from workers.backend import Backend

ENV = "SPECFLEET_FUSED_QKV"
NAMES = ("q_proj", "k_proj", "v_proj")


class Stack:
    """One layer's stacked weight [Nq + Nk + Nv, K] (and bias), the views its three linears
    hold, and the last stacked call's x with its k and v outputs."""

    def __init__(self, weight: mx.array, bias: mx.array | None, rows: list[int]):
        self.weight, self.bias = weight, bias
        self.cuts = [rows[0], rows[0] + rows[1]]  # column splits of the stacked output
        self.views = [weight[a:b] for a, b in zip([0, *self.cuts], [*self.cuts, sum(rows)])]
        self.bias_views = (
            None
            if bias is None
            else [bias[a:b] for a, b in zip([0, *self.cuts], [*self.cuts, sum(rows)])]
        )
        # (x, k, v) of the last stacked call: one attribute, set in one step, so an engine on
        # another thread sharing the model never pairs one call's x with another's k and v.
        self.last: tuple[mx.array, mx.array, mx.array] | None = None

    def holds(self, module: nn.Module, part: int) -> bool:
        """`module` still reads its view of the stack (not a weight set since)."""
        return module["weight"] is self.views[part] and (
            self.bias_views is None or module.get("bias") is self.bias_views[part]
        )


def _stack_of(module: nn.Module) -> tuple[Stack, int]:
    return module.__dict__["_qkv_stack"], module.__dict__["_qkv_part"]


class FusedQ(nn.Linear):
    """q_proj: the stacked matmul, q's columns returned, k's and v's kept for their calls."""

    def __call__(self, x: mx.array) -> mx.array:
        stack, _ = _stack_of(self)
        if not stack.holds(self, 0):
            return super().__call__(x)
        w = stack.weight
        wt = row_linear.held_view(self, "qkv_t", w, lambda: w.T)  # made once: no node a call
        y = x @ wt if stack.bias is None else mx.addmm(stack.bias, x, wt)
        q, k, v = mx.split(y, stack.cuts, axis=-1)
        stack.last = (x, k, v)
        return q


class FusedPart(nn.Linear):
    """k_proj / v_proj: the columns the stacked call on this x made, else its own matmul."""

    def __call__(self, x: mx.array) -> mx.array:
        stack, part = _stack_of(self)
        last = stack.last
        if last is not None and last[0] is x and stack.holds(self, part):
            return last[part]
        return super().__call__(x)


def _fusable(layers: list[object]) -> bool:
    if not all(type(m) in (nn.Linear, row_linear.ViewLinear) for m in layers):
        return False
    ws = [m["weight"] for m in layers]  # type: ignore[index]
    has_bias = {"bias" in m for m in layers}  # type: ignore[operator]
    return (
        len(has_bias) == 1
        and len({w.dtype for w in ws}) == 1
        and len({w.shape[1] for w in ws}) == 1
        and sum(w.nbytes for w in ws) > row_linear.WEIGHT_BYTES_MAX
    )


def install(model: object) -> int:
    """Stack every attention layer's q, k, v projections of `model`; returns how many layers."""
    done = 0
    for _, module in model.named_modules():  # type: ignore[attr-defined]
        layers = [getattr(module, name, None) for name in NAMES]
        if any(m is None for m in layers):
            continue
        held = layers[0].__dict__.get("_qkv_stack")  # type: ignore[union-attr]
        if held is not None and all(held.holds(m, i) for i, m in enumerate(layers)):
            stack = held  # installed before (and removed): the views are the stack's
        elif _fusable(layers):
            weight = mx.concatenate([m["weight"] for m in layers])  # type: ignore[index]
            bias = None
            if "bias" in layers[0]:  # type: ignore[operator]
                bias = mx.concatenate([m["bias"] for m in layers])  # type: ignore[index]
            stack = Stack(weight, bias, [m["weight"].shape[0] for m in layers])  # type: ignore[index]
            mx.eval(stack.weight, stack.views, stack.bias_views or [])
            for i, m in enumerate(layers):
                m.weight = stack.views[i]  # type: ignore[union-attr]
                if bias is not None:
                    m.bias = stack.bias_views[i]  # type: ignore[union-attr,index]
        else:
            continue
        for i, m in enumerate(layers):
            m.__dict__["_qkv_stack"], m.__dict__["_qkv_part"] = stack, i  # type: ignore[union-attr]
            m.__class__ = FusedQ if i == 0 else FusedPart  # type: ignore[union-attr]
        done += 1
    return done


def wanted() -> bool:
    return Backend.current().wants(ENV)


def remove(model: object) -> None:
    """Undo `install`'s classes (the weights stay views of the stack: the same numbers)."""
    row_linear.reclass(model, lambda m: type(m) in (FusedQ, FusedPart), row_linear.engine_linear())
