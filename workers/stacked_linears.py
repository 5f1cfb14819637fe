"""Linears that read the same input as one matmul over their stacked weights (MLX CUDA): an
attention layer's q, k and v projections, an MLP's gate and up projections. Separate calls each
stream too little to reach the card's bandwidth.

Per layer on an H200 (queued calls, weights streamed from HBM; bench/results/s63/device/):
- q, k, v of a ~6B Qwen3 (32 + 16 + 16 MiB bf16): 32-35 us as three gemvs at one row, 64 us as
  three skinny-kernel calls at five (workers/skinny_linear.py), 90-93 us as three GEMMs at 16-40
  rows; stacked 21.5 / 32 / 31 us. ~1B: 24-30 against 12 us at one row, 51 against 24 at five,
  76-78 against 28 at 40 rows (`fused_qkv_gpu.py`).
- gate, up (2 x 96 MiB at ~6B): level at one row (60 / 58 us), 67-74 against 61-67 at 5-40 rows;
  ~1B (2 x 24 MiB): level at one row (27), 63-66 against 43-48 at 5-40 rows (`fused_mlp_gpu.py`).
A layer saves that at every forward: decode steps, verify windows and prefill chunks alike.

The route installs once per model: a group's weights become row slices (views, no copy) of one
stacked weight, so the model holds no second copy. Whichever member is called first on an x runs
the stacked matmul, returns its own columns and keeps the others' for their calls on the same x
(mlx-lm calls q, k, v and gate, up in turn, but any order computes each stack once); once every
member has taken its part the stack lets the outputs go, so a forward's activations are not
held while it evaluates. A member whose weight was replaced since runs its own matmul. The
stacks assume decoder layers, whose members read one x: a member called on an x of its own (a
cross-attention's k, v) would compute every member's columns for it.

Numbers: a column is a dot product of x with one weight row either way. At one row (no bias) both
forms run MLX's gemv, equal bit for bit on the H200 (6.6B and ~1B shapes). At more rows the
GEMM's tiling, and so the rounding, may differ from the separate calls', as it already differs
between row counts; members small enough for row_linear's per-row gemvs, or skinny-sized, lose
those routes' row-for-row bits inside a larger stack. The engine's parity tests allow for that
(near ties); every GPU run of stop 63 read every row equal to plain decoding.

Default where launches and shapes cost the most (MLX CUDA: Backend.wants);
`SPECFLEET_STACKED_LINEARS` "1" / "0" installs it or not on any backend. Stacks of at most
row_linear's WEIGHT_BYTES_MAX (small models) keep row_linear's per-row gemvs instead.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from workers import row_linear, skinny_linear
from workers.backend import Backend

ENV = "SPECFLEET_STACKED_LINEARS"
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class Stack:
    """One group's stacked weight [sum N_i, K] (and bias), the row views its linears hold, and
    the last stacked call's x with every member's output."""

    def __init__(self, weight: mx.array, bias: mx.array | None, rows: list[int]):
        self.weight, self.bias = weight, bias
        ends = [sum(rows[: i + 1]) for i in range(len(rows))]
        self.cuts = ends[:-1]  # column splits of the stacked output
        self.views = [weight[a:b] for a, b in zip([0, *self.cuts], ends)]
        self.bias_views = (
            None if bias is None else [bias[a:b] for a, b in zip([0, *self.cuts], ends)]
        )
        # (x, outputs, parts taken) of the last stacked call: one attribute, set in one step, so
        # an engine on another thread sharing the model never pairs one x with another's outputs.
        self.last: tuple[mx.array, list[mx.array], set[int]] | None = None
        # 2-8-row calls through workers/skinny_linear.py's kernel (set at each install: its
        # wide route, MLX CUDA, off by default), not MLX's GEMM: a quarter of the GEMM's encode.
        self.skinny = False

    def holds(self, module: nn.Module, part: int) -> bool:
        """`module` still reads its view of the stack (not a weight set since)."""
        return module["weight"] is self.views[part] and (
            self.bias_views is None or module.get("bias") is self.bias_views[part]
        )

    def outputs(self, x: mx.array) -> tuple[mx.array, list[mx.array], set[int]]:
        """Every member's output for x: the stacked matmul, split (its transpose a held view)."""
        w = self.weight
        if self.skinny and self.bias is None and skinny_linear.takes(x, w):
            K = x.shape[-1]
            y = skinny_linear.matmul(x.reshape(-1, K), w).reshape(*x.shape[:-1], -1)
        else:
            wt = row_linear.held_view(self, "t", w, lambda: w.T)  # made once: no node a call
            y = x @ wt if self.bias is None else mx.addmm(self.bias, x, wt)
        last = (x, list(mx.split(y, self.cuts, axis=-1)), set[int]())
        self.last = last
        return last

    def take(self, x: mx.array, part: int) -> mx.array:
        """Member `part`'s output for x: kept from the stacked call on x, or a new one. The last
        member to take its part drops the outputs (held, they would pin a forward's activations
        while it evaluates)."""
        last = self.last
        if last is None or last[0] is not x:
            last = self.outputs(x)
        last[2].add(part)
        if len(last[2]) == len(last[1]) and self.last is last:
            self.last = None
        return last[1][part]


class StackedLinear(nn.Linear):
    """A member of a stack: its columns of the stacked call on this x (made by whichever member
    came first), else its own matmul."""

    def __call__(self, x: mx.array) -> mx.array:
        stack, part = self.__dict__["_stack"], self.__dict__["_stack_part"]
        if not stack.holds(self, part):
            return super().__call__(x)
        return stack.take(x, part)


def _stackable(layers: list[object]) -> bool:
    # StackedLinear too: a stack whose weights were replaced since is made again
    if not all(type(m) in (nn.Linear, row_linear.ViewLinear, StackedLinear) for m in layers):
        return False
    ws = [m["weight"] for m in layers]  # type: ignore[index]
    return (
        len({"bias" in m for m in layers}) == 1  # type: ignore[operator]
        and len({w.dtype for w in ws}) == 1
        and len({w.shape[1] for w in ws}) == 1
        and sum(w.nbytes for w in ws) > row_linear.WEIGHT_BYTES_MAX
    )


def _stack(layers: list[nn.Module]) -> Stack:
    """Concatenate the layers' weights once and give each its row view of the result."""
    weight = mx.concatenate([m["weight"] for m in layers])
    bias = mx.concatenate([m["bias"] for m in layers]) if "bias" in layers[0] else None
    stack = Stack(weight, bias, [m["weight"].shape[0] for m in layers])
    mx.eval(stack.weight, stack.views, stack.bias_views or [])
    for i, m in enumerate(layers):
        m.weight = stack.views[i]
        if stack.bias_views is not None:
            m.bias = stack.bias_views[i]
    return stack


def install(model: object) -> int:
    """Stack every group (GROUPS) of `model`'s modules; returns how many groups. Their 2-8-row
    calls take the skinny kernel where its wide route is wanted now (skinny_linear.WIDE_ENV)."""
    skinny = skinny_linear.wanted() and skinny_linear.wide_wanted()
    done = 0
    for _, module in model.named_modules():  # type: ignore[attr-defined]
        for names in GROUPS:
            layers = [getattr(module, name, None) for name in names]
            if any(m is None for m in layers):
                continue
            held = layers[0].__dict__.get("_stack")  # type: ignore[union-attr]
            if held is not None and all(held.holds(m, i) for i, m in enumerate(layers)):
                stack = held  # installed before (and removed since): the views are the stack's
            elif _stackable(layers):
                stack = _stack(layers)  # type: ignore[arg-type]
            else:
                continue
            stack.skinny = skinny
            for i, m in enumerate(layers):
                m.__dict__["_stack"], m.__dict__["_stack_part"] = stack, i  # type: ignore[union-attr]
                m.__class__ = StackedLinear  # type: ignore[union-attr]
            done += 1
    return done


def wanted() -> bool:
    return Backend.current().wants(ENV)


def remove(model: object) -> None:
    """Undo `install`'s classes (the weights stay views of the stack: the same numbers)."""
    linear = row_linear.engine_linear()
    for _, m in model.named_modules():  # type: ignore[attr-defined]
        if type(m) is StackedLinear:
            m.__dict__["_stack"].last = None  # no outputs held past the route
            m.__class__ = linear
