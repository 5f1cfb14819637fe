"""A separate small draft model (same vocabulary as the target), drafted for the whole batch.

The draft model keeps its own ragged per-row cache (workers.kv_cache). Row r's cache holds a
prefix of the row's history; the rest (its "tail": at least the unverified last token, plus the
last draft when every draft was accepted) is fed as the first, ragged window of the next
proposal. Each later draft step is a one-token window for every row at its own position.

Prefill is lazy: a joining row's prompt enters the draft cache at its first proposal, not when
it joins, and rounds that draft nothing (adaptive depth 0) leave the cache behind, so a draft
model that does not pay costs nothing once the depth policy stops drafting with it. A long tail
is caught up in prefill chunks before the proposal's first window.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from workers.drafters.base import DraftRequest, Proposal, empty_proposal
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache
from workers.language_model import LanguageModel


class ModelDrafter:
    name = "model"
    needs_target_hidden = False
    # Its tails come from the host's exact histories and lengths, so the engine reads every
    # round back before the next. A device-resident version (pending verifies as device
    # arrays, pipelined rounds) measured no faster: 0.83-1.05x of this on an H200 and
    # 0.94-1.05x on the CPU (bench/draft_model_ab.py at f33406f, bench/results/s26).
    device_resident = False

    def __init__(self, model: LanguageModel, prefill_step_size: int = 512):
        self.model = model
        self.prefill_step_size = prefill_step_size
        self.cache = BatchCache.for_model(model)
        self.histories: list[Sequence[int]] = []
        # Tokens fed during the last proposal per row, and how many of them were the tail.
        self._fed = np.zeros(0, dtype=np.int64)
        self._tail = np.zeros(0, dtype=np.int64)

    def cost_ratio(self, target: LanguageModel, width: int = 8, reps: int = 3) -> float:
        """Seconds of one draft-model forward over one target forward, same [1, width] window
        (fastest of `reps` after a warm-up): a calibration for the depth policy, which never
        drafts with a model that costs as much as the target it drafts for."""
        x = mx.zeros((1, width), dtype=mx.int32)
        times = []
        for model in (self.model, target):
            mx.eval(model(x))  # type: ignore[operator]  # warm-up (kernels, buffers)
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                mx.eval(model(x))  # type: ignore[operator]
                best = min(best, time.perf_counter() - t0)
            times.append(best)
        return times[0] / max(times[1], 1e-9)

    def add_rows(self, histories: Sequence[Sequence[int]], hidden: object = None) -> None:
        self.cache.append(BatchCache.for_model(self.model, len(histories)))  # filled lazily
        self.histories.extend(histories)

    def keep_rows(self, keep: Sequence[int]) -> None:
        self.cache.keep_rows(keep)
        self.histories = [self.histories[i] for i in keep]

    def propose(self, request: DraftRequest) -> Proposal:
        self.histories = list(request.histories)
        depths = np.asarray(request.depths, dtype=np.int64)
        B, K = len(depths), int(depths.max(initial=0))
        if K == 0:
            return empty_proposal(B)
        behind = [h[int(n) : len(h) - 1] for h, n in zip(self.histories, self.cache.lengths)]
        if max(len(b) for b in behind) >= self.prefill_step_size:
            prefill(self.model, self.cache, behind, self.prefill_step_size)  # catch up first
        lengths = self.cache.lengths
        tails = [h[int(n) :] for h, n in zip(self.histories, lengths)]
        self._tail = np.array([len(t) for t in tails], dtype=np.int64)
        tokens, valid = pad_windows(tails)
        drafted, probs = [], []
        for step in range(K):
            logits = forward_window(self.model, self.cache, tokens, valid)  # [B, W, V]
            self.cache.commit(valid)  # tentatively; commit() rolls back the rejected part
            last = mx.array((valid - 1).astype(np.int32))[:, None, None]  # [B, 1, 1]
            step_logits = mx.take_along_axis(logits, last, axis=1)[:, 0]  # [B, V]
            chosen, q = request.select(step_logits, step)
            drafted.append(chosen)
            probs.append(q)
            tokens, valid = chosen[:, None], np.ones(B, dtype=np.int64)
        # The last draft is chosen but never fed: K-1 draft tokens went in after the tail.
        self._fed = self._tail + (K - 1)
        # [B, K] left lazy: the K steps run with the verify that consumes them, one launch and
        # one wait per round instead of a wait for the drafts and another for the verify.
        out = mx.stack(drafted, axis=1).astype(mx.int32)
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        return Proposal(tokens=out, counts=np.minimum(depths, K), probs=q_all)

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        # Host counts: this drafter is not device_resident, so the engine never pipelines it.
        assert isinstance(num_accepted, np.ndarray), type(num_accepted)
        if self._fed.shape[0] != self.cache.num_rows:
            return  # no proposal this round (every row had depth 0)
        # Keep the tail and the accepted drafts that were fed; drop the rest.
        keep = self._tail + np.minimum(
            np.asarray(num_accepted, dtype=np.int64), self._fed - self._tail
        )
        self.cache.rollback(self._fed - keep)
        self._fed = self._tail = np.zeros(0, dtype=np.int64)
