"""The MTP drafter's verified pairs: (target hidden h_t, committed token x_{t+1}) of one or more
verifies, waiting to enter the head's cache (workers/drafters/mtp.py's backlog), and a joiner's
last prompt pair held back so that it drafts from its first round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np


@dataclass
class Pairs:
    """Verified (hidden, next token) pairs of one or more verifies, not yet in the MTP cache."""

    hidden: mx.array  # [B, P, H] as the head reads it
    tokens: mx.array  # [B, P] the committed token after each hidden
    count: mx.array  # [B] int32 valid pairs per row (a prefix)
    count_host: np.ndarray | None = None  # the same counts, when the host has them

    def with_rows_added(self, n: int, at_start: bool = False) -> Pairs:
        """n rows without pairs added after the rows (or before them, `at_start`)."""
        B, P, H = self.hidden.shape

        def add(x: mx.array, zeros: mx.array) -> mx.array:
            return mx.concatenate([zeros, x] if at_start else [x, zeros])

        host = None
        if self.count_host is not None:
            none = np.zeros(n, dtype=np.int64)
            host = np.concatenate([none, self.count_host] if at_start else [self.count_host, none])
        return Pairs(
            add(self.hidden, mx.zeros((n, P, H), self.hidden.dtype)),
            add(self.tokens, mx.zeros((n, P), self.tokens.dtype)),
            add(self.count, mx.zeros(n, dtype=mx.int32)),
            host,
        )

    def with_rows(self, idx: list[int]) -> Pairs:
        rows = mx.array(np.asarray(idx, dtype=np.int32))
        host = None if self.count_host is None else self.count_host[idx]
        return Pairs(self.hidden[rows], self.tokens[rows], self.count[rows], host)

    @classmethod
    def packed(cls, parts: list[Pairs], multiple: int = 1) -> Pairs:
        """One window holding every part's valid pairs back to back, per row: part j's pairs
        start where part j-1's valid ones end (its padding is overwritten by part j); its
        width rounded up to `multiple` (the tail is padding, past every row's count)."""
        B, _, H = parts[0].hidden.shape
        W = -(-sum(p.tokens.shape[1] for p in parts) // multiple) * multiple
        tokens = mx.zeros((B, W), dtype=mx.int32)
        hidden = mx.zeros((B, W, H), dtype=parts[0].hidden.dtype)
        offset = mx.zeros((B,), dtype=mx.int32)
        for p in parts:
            idx = offset[:, None] + mx.arange(p.tokens.shape[1])[None]  # [B, P]
            tokens = mx.put_along_axis(tokens, idx, p.tokens.astype(mx.int32), axis=1)
            hidden = mx.put_along_axis(hidden, mx.broadcast_to(idx[..., None], (*idx.shape, H)),
                                       p.hidden, axis=1)  # fmt: skip
            offset = offset + p.count
        hosts = [p.count_host for p in parts if p.count_host is not None]
        host = np.sum(hosts, axis=0) if len(hosts) == len(parts) else None
        return cls(hidden, tokens, offset, host)


def hold_last_pairs(hidden: mx.array, nexts: Sequence[Sequence[int]]) -> Pairs | None:
    """Each joiner's last prompt pair as a one-pair backlog entry, kept out of its new cache
    rows (hidden [n, P, H] as the head reads it, nexts[r] the row's paired tokens). The first
    drafting round runs it and drafts from its output: pair (h_{L-2}, x_{L-1}) predicts x_L,
    the first token the row's first round verifies, so a joiner drafts from its first round
    on (it waited for a verify before). None where no joiner has a pair (one-token prompts)."""
    counts = np.array([len(x) for x in nexts], dtype=np.int64)
    has = (counts > 0).astype(np.int64)
    if not has.any():
        return None
    at = mx.array(np.maximum(counts - 1, 0).astype(np.int32))[:, None, None]  # [n, 1, 1]
    h = mx.take_along_axis(hidden, at, axis=1)  # [n, 1, H]
    tokens = np.array([[x[-1] if len(x) else 0] for x in nexts], dtype=np.int32)  # [n, 1]
    return Pairs(h, mx.array(tokens), mx.array(has.astype(np.int32)), has)
