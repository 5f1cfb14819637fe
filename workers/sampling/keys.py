"""Positioned randomness: every draw is keyed by (request seed, absolute position, stream).

Seeded sampling in specfleet is defined once, everywhere (plain decode, verify, drafters):

    token = argmax(warped_logits + gumbel(key(seed, position, STREAM_TARGET)))

which is MLX's `categorical(warped_logits, key=k)` written out (Gumbel-max trick). The key
depends only on the request's seed and the token's absolute position in that request, never on
the batch a row happens to share or on a global RNG (docs/field-failures.md, seed 002:
batch-dependent draws make a seeded request's output change with its neighbours).
Speculation therefore cannot change a coupled/exact row's output: the target's sample at
position t is the same number whichever round, depth or batch computes it.

Streams keep independent uses of one (seed, position) apart: the target's sample, a rejection
drafter's own sample, and the acceptance uniform must be independent for Leviathan et al.'s
proof to hold. Noise at a position is only ever consumed for the token at that position, and a
discarded draft's noise influenced nothing that was kept, so re-drafting a position later is
still fresh randomness.

Keys are derived on the host with splitmix64 (cheap; [B, W] of them per round), then MLX's
threefry expands each key over the vocabulary through `mx.vmap`, so a row's noise is a pure
function of its key (the same numbers alone or batched).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import mlx.core as mx
import numpy as np

STREAM_TARGET = 1  # the target's sample; coupled drafters reuse it on purpose
STREAM_DRAFT = 2  # a drafter's independent sample (rejection / exact acceptance)
STREAM_ACCEPT = 3  # the acceptance uniform u in "accept if u * q(x) < p(x)"

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return z ^ (z >> np.uint64(31))


def position_keys(
    seeds: Sequence[int],  # [B], each in [0, 2**63)
    positions: np.ndarray,  # [B, W] absolute token positions (>= 0)
    stream: int | Sequence[int],  # one stream for all rows, or one per row [B]
) -> mx.array:
    """[B, W, 2] uint32 MLX PRNG keys, one per (seed, position, stream)."""
    pos = np.asarray(positions, dtype=np.int64)
    if pos.ndim != 2 or pos.shape[0] != len(seeds):
        raise ValueError(f"positions must be [B={len(seeds)}, W], got shape {pos.shape}")
    if pos.size and pos.min() < 0:
        raise ValueError(f"positions must be >= 0, got min {pos.min()}")
    seed = np.asarray([int(s) for s in seeds], dtype=np.uint64)[:, None]  # [B, 1]
    streams = np.broadcast_to(np.asarray(stream, dtype=np.uint64).reshape(-1, 1), seed.shape)
    h = _splitmix64(seed ^ _splitmix64(streams))
    h = _splitmix64(h ^ pos.astype(np.uint64))  # [B, W]
    words = np.stack([h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)], axis=-1)
    return mx.array(words.astype(np.uint32))


@lru_cache(maxsize=16)
def _gumbel_rows(vocab_size: int):  # noqa: ANN202 - returns an mx.vmap'd function
    return mx.vmap(lambda k: mx.random.gumbel((vocab_size,), key=k))


@lru_cache(maxsize=1)
def _uniform_rows():  # noqa: ANN202
    return mx.vmap(lambda k: mx.random.uniform(shape=(1,), key=k))


def window_positions(start_positions: Sequence[int], width: int) -> np.ndarray:
    """[B, W] positions start[b] + i for i in 0..W-1."""
    start = np.asarray(start_positions, dtype=np.int64).reshape(-1, 1)
    return start + np.arange(width, dtype=np.int64)[None, :]


def gumbel_noise(
    seeds: Sequence[int],  # [B]
    start_positions: Sequence[int],  # [B] absolute position of window slot 0
    width: int,  # W
    vocab_size: int,  # V
    stream: int | Sequence[int] = STREAM_TARGET,  # or one per row
) -> mx.array:
    """[B, W, V] float32 standard Gumbel noise; row b slot i is keyed by (seed[b], start[b]+i)."""
    B = len(seeds)
    if B == 0 or width == 0:
        return mx.zeros((B, width, vocab_size), dtype=mx.float32)
    keys = position_keys(seeds, window_positions(start_positions, width), stream)
    return _gumbel_rows(vocab_size)(keys.reshape(B * width, 2)).reshape(B, width, vocab_size)


def uniform_noise(
    seeds: Sequence[int],  # [B]
    start_positions: Sequence[int],  # [B]
    width: int,  # W
    stream: int = STREAM_ACCEPT,
) -> mx.array:
    """[B, W] float32 uniforms in [0, 1), keyed like `gumbel_noise`."""
    B = len(seeds)
    if B == 0 or width == 0:
        return mx.zeros((B, width), dtype=mx.float32)
    keys = position_keys(seeds, window_positions(start_positions, width), stream)
    return _uniform_rows()(keys.reshape(B * width, 2)).reshape(B, width)
