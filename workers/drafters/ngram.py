"""Prompt-lookup drafting: continue the latest earlier match of the row's last n tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from workers.drafters.base import DraftRequest, Proposal


@dataclass
class NgramDrafter:
    """No model: a draft is what followed the same n-gram earlier in prompt + output.

    Tries n = max_ngram down to min_ngram and takes the most recent match, as vLLM's and
    mlx-lm's prompt-lookup decoders do. Its q is a point mass on the proposed token.
    """

    max_ngram: int = 3
    min_ngram: int = 1
    name: str = "ngram"
    needs_target_hidden: bool = False
    device_resident: bool = False  # looks up the host's histories

    def __post_init__(self) -> None:
        if not (1 <= self.min_ngram <= self.max_ngram):
            raise ValueError(
                f"NgramDrafter(min_ngram={self.min_ngram}, max_ngram={self.max_ngram}) is "
                "invalid: need 1 <= min_ngram <= max_ngram"
            )

    def add_rows(self, histories: Sequence[Sequence[int]], hidden: object = None) -> None:
        pass  # stateless: it reads the histories at every proposal

    def keep_rows(self, keep: Sequence[int]) -> None:
        pass

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        pass

    def propose(self, request: DraftRequest) -> Proposal:
        depths = np.asarray(request.depths, dtype=np.int64)
        K = int(depths.max(initial=0))
        tokens = np.zeros((len(depths), K), dtype=np.int32)
        counts = np.zeros(len(depths), dtype=np.int64)
        for r, (history, k) in enumerate(zip(request.histories, depths)):
            if k > 0:
                found = self.lookup(np.asarray(history, dtype=np.int64), int(k))
                tokens[r, : len(found)] = found
                counts[r] = len(found)
        return Proposal(tokens=tokens, counts=counts)

    def lookup(self, history: np.ndarray, k: int) -> np.ndarray:
        """Up to k tokens that followed the latest earlier occurrence of the history's tail."""
        L = len(history)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            tail = history[L - n :]
            # Candidate starts 0..L-n-1: every earlier window that has a continuation.
            windows = sliding_window_view(history[: L - 1], n)
            hits = np.flatnonzero((windows == tail).all(axis=1))
            if hits.size:
                # Copy forward from just after the match. When the copy reaches the end of the
                # history it continues into its own output, so a loop of period p still yields
                # k tokens instead of p.
                start = int(hits[-1]) + n
                span = L - start
                out: list[int] = []
                for j in range(k):
                    out.append(int(history[start + j]) if j < span else out[j - span])
                return np.asarray(out, dtype=np.int64)
        return history[:0]
