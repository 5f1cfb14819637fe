"""Lossless sampling for speculative decoding: positioned keys, processors, acceptance."""

from workers.accept import coupled_accept, rejection_accept
from workers.sampling.keys import (
    STREAM_ACCEPT,
    STREAM_DRAFT,
    STREAM_TARGET,
    gumbel_noise,
    uniform_noise,
)
from workers.sampling.processors import BatchSampling, apply_penalties, sample, warp

__all__ = [
    "STREAM_ACCEPT",
    "STREAM_DRAFT",
    "STREAM_TARGET",
    "BatchSampling",
    "apply_penalties",
    "coupled_accept",
    "gumbel_noise",
    "rejection_accept",
    "sample",
    "uniform_noise",
    "warp",
]
