"""Target forward that also returns the last hidden state an MTP head consumes.

Which one (before or after the target's final norm) is the head's `hidden_norm` setting; see
workers/mtp/qwen35.py. The post-norm hidden is the lm_head's input, so returning it costs nothing.

Works for mlx-lm models shaped `Model.model.{embed_tokens, layers, norm}` with an optional
`lm_head` (llama, qwen2, qwen3, mistral, ...) and for qwen3_5 / qwen3_next hybrids (which wrap the
text model in `language_model` and give linear-attention layers their own mask). It repeats the
model's own forward op for op, so the logits equal `model(inputs, cache)` bit for bit.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask, create_ssm_mask


def text_model(model: Any) -> Any:
    """The module that owns `.model` (backbone) and, when untied, `.lm_head`."""
    tm = model.language_model if hasattr(model, "language_model") else model
    inner = getattr(tm, "model", None)
    missing = [a for a in ("embed_tokens", "layers", "norm") if not hasattr(inner, a)]
    if missing:
        raise TypeError(
            f"{type(model).__name__} has no backbone with {missing}; the MTP drafter needs an "
            "mlx-lm model shaped Model.model.{embed_tokens, layers, norm} (llama/qwen-style)"
        )
    return tm


def embed(model: Any, tokens: mx.array) -> mx.array:
    """Target input embedding [B, L] -> [B, L, H] (the MTP head shares it)."""
    return text_model(model).model.embed_tokens(tokens)


def lm_head(model: Any, normed: mx.array) -> mx.array:
    """Target output head on post-norm hidden [B, L, H] -> logits [B, L, V] (shared with MTP)."""
    tm = text_model(model)
    head: nn.Module | None = getattr(tm, "lm_head", None)
    if head is not None:
        return head(normed)
    return tm.model.embed_tokens.as_linear(normed)


def shared_modules(model: Any) -> list[nn.Module]:
    """The target's modules `embed` and `lm_head` read (whose weights an MTP head step uses)."""
    tm = text_model(model)
    head: nn.Module | None = getattr(tm, "lm_head", None)
    return [tm.model.embed_tokens] + ([head] if head is not None else [])


def final_norm(model: Any, hidden: mx.array) -> mx.array:
    """The target's final norm on a pre-norm hidden [B, L, H] (the post-norm hidden)."""
    return text_model(model).model.norm(hidden)


def target_hidden_and_logits(
    model: Any, inputs: mx.array, cache: list[Any] | None = None, post_norm: bool = False
) -> tuple[mx.array, mx.array]:
    """Forward `inputs` [B, L]; returns (last hidden [B, L, H], logits [B, L, V]).

    The hidden is the last decoder layer's output, or with `post_norm` that output after the
    final norm (the very tensor the lm_head reads, so no norm is computed twice).

    `cache` is the model's per-layer cache list (mlx-lm duck type or the engine's batch cache);
    it is updated exactly as `model(inputs, cache=cache)` would update it.
    """
    inner = text_model(model).model
    h = inner.embed_tokens(inputs)
    layers = list(inner.layers)
    if cache is None:
        cache = [None] * len(layers)
    is_linear = [bool(getattr(layer, "is_linear", False)) for layer in layers]
    fa_mask = ssm_mask = None
    if not all(is_linear):
        fa_mask = create_attention_mask(h, cache[is_linear.index(False)])
    if any(is_linear):
        ssm_mask = create_ssm_mask(h, cache[is_linear.index(True)])
    for layer, c, lin in zip(layers, cache, is_linear, strict=True):
        h = layer(h, mask=ssm_mask if lin else fa_mask, cache=c)
    normed = inner.norm(h)
    return (normed if post_norm else h), lm_head(model, normed)
