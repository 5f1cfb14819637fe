"""The routes that re-class a model's modules: installed in one place, and the way back to the
modules mlx-lm built.

Engines install routes on the model they are given (workers/row_linear.py, skinny_linear.py,
cpu_ops.py), and one for the process: MLX's CPU kernels built for the CPU (workers/cpu_jit.py;
same bits, so nothing undoes it). A baseline or a reference decode that shares that model must
run mlx-lm's own modules: `as_mlx_lm_built` undoes every route for its block and puts them back
after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import mlx.nn as nn

from workers import cpu_jit, cpu_ops, row_linear, skinny_linear, stacked_linears
from workers.backend import Backend


def install(model: object, backend: Backend, stack: bool = True) -> None:
    """The engine's routes on `model` (a target, an MTP head, a draft model), in the order their
    predicates need: linears reading one input as one matmul (q, k, v; gate, up: MLX CUDA),
    few-row linears as gemvs (MLX CUDA), the skinny kernel (MLX CUDA), held weight views for every
    other linear, then the CPU's fewer-node RoPE and RMSNorm. First, for the process, before the
    model's first compiled kernel is built: the CPU's JIT flags. `stack` False: no stacked
    linears, and none left from an earlier engine (a model whose steps compile:
    workers/drafting.py)."""
    cpu_jit.install()
    if stack and stacked_linears.wanted():
        stacked_linears.install(model)
    else:  # an earlier engine's stacks on a model this one runs unstacked
        stacked_linears.remove(model)
    if backend.wants(row_linear.ENV):
        row_linear.install(model)
    if skinny_linear.wanted():
        skinny_linear.install(model)
    row_linear.install_views(model)
    if cpu_ops.wanted():
        cpu_ops.install(model)


def mlx_lm_classes() -> dict[type, type]:
    """Each route class -> the mlx class it stands in for."""
    back: dict[type, type] = {
        row_linear.RowLinear: nn.Linear,
        skinny_linear.SkinnyLinear: nn.Linear,
        stacked_linears.StackedLinear: nn.Linear,
    }
    for routes in (cpu_ops.ROUTES, row_linear.VIEW_ROUTES):
        back.update({route: base for base, route in routes.items()})
    return back


@contextmanager
def as_mlx_lm_built(model: object) -> Iterator[object]:
    """`model` with every routed module re-classed to mlx-lm's class for the block."""
    back = mlx_lm_classes()
    routed = [m for _, m in model.named_modules() if type(m) in back]  # type: ignore[attr-defined]
    classes = [type(m) for m in routed]
    for m in routed:
        m.__class__ = back[type(m)]
    try:
        yield model
    finally:
        for m, cls in zip(routed, classes):
            m.__class__ = cls
