"""Replace mlx-lm's attention function where a model's layers call it.

mlx-lm imports `scaled_dot_product_attention` by name into each model file, so a route replaces
it there, once per file: `wrap(original)` sends the calls it takes to its own attention and the
rest to `original` unchanged (workers/attention_cuda.py on MLX CUDA, workers/cpu_ops.py on the
CPU).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def route_attention(model: object, wrap: Callable[[Any], Any], marker: str) -> None:
    """Wrap the attention function of the files `model`'s attention layers come from, unless a
    wrapper carrying `marker` (an attribute set to True) is already in place."""
    for layer in getattr(model, "layers", []):
        attn = getattr(layer, "self_attn", None)
        module = sys.modules.get(type(attn).__module__) if attn is not None else None
        original = getattr(module, "scaled_dot_product_attention", None)
        if original is None or getattr(original, marker, False):
            continue
        route = wrap(original)
        setattr(route, marker, True)
        module.scaled_dot_product_attention = route  # type: ignore[union-attr]
