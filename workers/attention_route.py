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
    wrapper named `marker` is already anywhere in the chain (each wrapper carries the names of
    every wrapper below it, so two routes installed in turns never wrap each other again)."""
    for layer in getattr(model, "layers", []):
        attn = getattr(layer, "self_attn", None)
        module = sys.modules.get(type(attn).__module__) if attn is not None else None
        original = getattr(module, "scaled_dot_product_attention", None)
        below: frozenset[str] = getattr(original, "_routes", frozenset())
        if original is None or marker in below:
            continue
        route = wrap(original)
        route._routes = below | {marker}
        module.scaled_dot_product_attention = route  # type: ignore[union-attr]
