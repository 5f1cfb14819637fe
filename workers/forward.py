"""Model forwards over ragged windows: the only place the engine calls an mlx-lm model."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from workers import launch
from workers.kv_cache import BatchCache
from workers.language_model import LanguageModel


def pad_windows(windows: Sequence[Sequence[int]], width: int = 1) -> tuple[mx.array, np.ndarray]:
    """Right-pad each row's window to the longest (at least `width`): ([B, W], [B] valid).

    Padding sits after a row's valid tokens, so causal masking already hides it from them;
    the cache commit then keeps only the valid prefix.
    """
    tokens, valid = pad_windows_host(windows, width)
    return mx.array(tokens), valid


def pad_windows_host(
    windows: Sequence[Sequence[int]], width: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """`pad_windows` on the host: ([B, W] int32, [B] valid) NumPy arrays."""
    valid = np.array([len(w) for w in windows], dtype=np.int64)
    W = max(int(valid.max(initial=0)), width)
    tokens = np.zeros((len(windows), W), dtype=np.int32)
    for r, w in enumerate(windows):
        tokens[r, : len(w)] = w
    return tokens, valid


def forward_window(
    model: LanguageModel, cache: BatchCache, tokens: mx.array, valid: np.ndarray
) -> mx.array:
    """Run `tokens` [B, W] at each row's next positions; returns logits [B, W, V].

    Writes the window's keys into the cache but commits nothing: the caller decides how many
    of each row's window tokens to keep (all for prefill, the accepted prefix for verify).
    """
    cache.set_window_valid(valid)
    return model(tokens, cache=cache.layers)


def forward_window_hidden(
    model: LanguageModel,
    cache: BatchCache,
    tokens: mx.array,
    valid: np.ndarray,
    post_norm: bool = False,
) -> tuple[mx.array, mx.array]:
    """Like forward_window, also returning the last layer's hidden [B, W, H] (pre-norm, or
    after the final norm with post_norm: the lm_head's input, at no extra cost)."""
    from workers.mtp.hidden import target_hidden_and_logits

    cache.set_window_valid(valid)
    return target_hidden_and_logits(model, tokens, cache.layers, post_norm)


def prefill_chunk(
    model: LanguageModel,
    cache: BatchCache,
    sequences: Sequence[Sequence[int]],
    start: int,
    step_size: int,
    want_hidden: bool = False,
    post_norm: bool = False,
) -> mx.array | None:
    """Append tokens [start, start + step_size) of each row's sequence to its cache.

    With want_hidden, returns their hidden states [B, W, H] (for MTP drafters; pre-norm, or
    post-norm with post_norm).
    """
    windows = [s[start : start + step_size] for s in sequences]
    # Where each new shape is a graph build (MLX CUDA: cache.span > 1), the chunk's width
    # rounds up like attention spans, so prompts of similar lengths share a prefill graph.
    longest = max((len(w) for w in windows), default=0)
    tokens, valid = pad_windows(windows, -(-longest // cache.span) * cache.span)
    hidden = None
    if want_hidden:
        h, _ = forward_window_hidden(model, cache, tokens, valid, post_norm)
        hidden = h[:, : max(1, int(valid.max()))]
    else:
        forward_window(model, cache, tokens, valid)
    cache.commit(valid)
    # Launch now so each chunk's graph is freed before the next one, without waiting for it:
    # with rows decoding, a wait here is also a wait for the round in flight. Where the step
    # routes through a launcher thread, queued behind its launch (workers/launch.py).
    launch.evaluate_behind(cache.state_arrays(), [] if hidden is None else [hidden])
    return hidden


def prefill(
    model: LanguageModel,
    cache: BatchCache,
    sequences: Sequence[Sequence[int]],
    step_size: int,
    want_hidden: bool = False,
    post_norm: bool = False,
) -> mx.array | None:
    """Append each row's whole sequence, chunk by chunk; hidden [B, max_len, H] if wanted."""
    longest = max((len(s) for s in sequences), default=0)
    chunks = [
        prefill_chunk(model, cache, sequences, start, step_size, want_hidden, post_norm)
        for start in range(0, longest, step_size)
    ]
    hidden = [h for h in chunks if h is not None]
    return mx.concatenate(hidden, axis=1) if hidden else None
