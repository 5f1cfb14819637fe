"""A separate small draft model (same vocabulary as the target), drafted for the whole batch.

The draft model keeps its own ragged per-row cache (workers.kv_cache). It is device-resident:
a round is built before the host has read the last one (workers/engine.py, pipelined rounds),
so what the cache has not been fed yet comes in two parts:

- host tokens: each row's history from `exact_len` (what the cache holds, exactly) on, and
- pending verifies: the tokens of the rounds the host has not read yet (`Pending`: [B, K+1]
  tokens and [B] device counts), one entry per round launched since the last `tighten`.

A drafting round feeds both as one window per row (host tokens, then each pending verify's
valid tokens back to back), drafts from the logits at the window's last valid token, and
chains the other drafts one token at a time, all on the device. `commit` then rolls back the
chained drafts and the window's last token: the cache ends one token short of everything
committed, so the next window always starts with a token the host knows, and every row has at
least one token to draft from (a row that just joined: its prompt's last). Once the host has
read a round, `tighten` turns that round's pending entry into host tokens and learns how much
the last drafting round fed.

Lazy: rounds that draft nothing (adaptive depth 0) run no draft forward, and host tokens wait
until the next drafting round (long ones in prefill chunks first), so a draft model that does
not pay costs nothing once the depth policy stops drafting with it. A joining row's prompt is
host tokens too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from workers.drafters.base import DraftRequest, Proposal, empty_proposal
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache
from workers.language_model import LanguageModel


@dataclass
class Pending:
    """A verify the host has not read: the tokens each row committed ([B, W] int32, its first
    count[r] valid; count [B] int32 on the device)."""

    tokens: mx.array
    count: mx.array

    def with_rows(self, idx: list[int]) -> Pending:
        rows = mx.array(np.asarray(idx, dtype=np.int32))
        return Pending(self.tokens[rows], self.count[rows])

    def with_rows_added(self, n: int) -> Pending:
        W = self.tokens.shape[1]
        return Pending(
            mx.concatenate([self.tokens, mx.zeros((n, W), dtype=mx.int32)]),
            mx.concatenate([self.count, mx.zeros(n, dtype=mx.int32)]),
        )


class ModelDrafter:
    name = "model"
    needs_target_hidden = False
    device_resident = True

    def __init__(self, model: LanguageModel, prefill_step_size: int = 512):
        self.model = model
        self.prefill_step_size = prefill_step_size
        self.cache = BatchCache.for_model(model)
        self.histories: list[Sequence[int]] = []  # live references to the rows' histories
        self.exact_len = np.zeros(0, dtype=np.int64)  # [B] history tokens the cache holds
        # Verifies the host has not read, oldest first: the histories hold every other round.
        self.pending: list[Pending] = []
        # [B] the round in flight fed rows whose exact length the host learns at `tighten`
        self._fed = np.zeros(0, dtype=bool)
        self._drafted = False  # a window was fed since the last commit
        self._chained = 0  # drafts fed after it (rolled back at commit with its last token)
        # Round a window's width up to a multiple of this (the engine sets 8 where each new
        # shape costs a graph build, MLX CUDA: see workers/backend.py).
        self.pad_packed_to = 1

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
        n = len(histories)
        self.cache.append(BatchCache.for_model(self.model, n))  # fed lazily: host tokens
        self.histories.extend(histories)
        self.exact_len = np.concatenate([self.exact_len, np.zeros(n, dtype=np.int64)])
        self._fed = np.concatenate([self._fed, np.zeros(n, dtype=bool)])
        self.pending = [p.with_rows_added(n) for p in self.pending]  # no tokens for joiners

    def keep_rows(self, keep: Sequence[int]) -> None:
        idx = list(keep)
        self.cache.keep_rows(idx)
        self.histories = [self.histories[i] for i in idx]
        self.exact_len = self.exact_len[idx]
        self._fed = self._fed[idx]
        self.pending = [p.with_rows(idx) for p in self.pending] if idx else []

    def tighten(self, bounds: np.ndarray, rows: np.ndarray, in_flight: bool = True) -> None:
        """The host has read every round but the one `in_flight`: their tokens are in the
        histories now, so their pending entries become host tokens; and a drafting round in
        flight fed each row all it had committed before it (the histories' lengths now) but
        the last token."""
        known = self._known()
        self.exact_len = np.where(self._fed, known - 1, self.exact_len)
        self._fed[:] = False
        self.pending = self.pending[-1:] if in_flight else []
        self.cache.tighten(self.exact_len, np.ones(len(known), dtype=bool), exact=True)

    def propose(self, request: DraftRequest) -> Proposal:
        self.histories = list(request.histories)
        depths = np.asarray(request.depths, dtype=np.int64)
        B, K = len(depths), int(depths.max(initial=0))
        if K == 0:
            return empty_proposal(B)
        known = self._known()
        # Long host gaps (a prompt, a stretch of plain rounds) go in prefill chunks first,
        # all but the last token, which starts the window.
        behind = [h[int(a) : int(b) - 1] for h, a, b in zip(self.histories, self.exact_len,
                                                           known)]  # fmt: skip
        if max(len(x) for x in behind) >= self.prefill_step_size:
            prefill(self.model, self.cache, behind, self.prefill_step_size)
            self.exact_len = self.exact_len + np.array([len(x) for x in behind])
        tokens, count, host_count = self._window(known)
        W = tokens.shape[1]
        if host_count is not None:  # nothing pending: exact counts, an exact cache after
            logits = forward_window(self.model, self.cache, tokens, host_count)
            self.cache.commit(host_count)
            self.exact_len = known - 1  # (after commit rolls the last token back)
        else:
            logits = forward_window(self.model, self.cache, tokens, np.full(B, W))
            self.cache.commit_lazy(count, W)
            self._fed[:] = True  # tighten learns the exact length
        self.pending = []
        last = mx.maximum(count - 1, 0)[:, None, None]  # [B, 1, 1] each row's last valid token
        step_logits = mx.take_along_axis(logits, last, axis=1)[:, 0]  # [B, V]
        drafted, probs = [], []
        ones = np.ones(B, dtype=np.int64)
        for step in range(K):
            chosen, q = request.select(step_logits, step)
            drafted.append(chosen)
            probs.append(q)
            if step + 1 < K:  # fed tentatively; commit rolls the chain back
                step_logits = forward_window(self.model, self.cache, chosen[:, None], ones)[:, 0]
                self.cache.commit(ones)
        self._drafted, self._chained = True, K - 1
        # [B, K] left lazy: the K steps run with the verify that consumes them, one launch and
        # one wait per round instead of a wait for the drafts and another for the verify.
        out = mx.stack(drafted, axis=1).astype(mx.int32)
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        return Proposal(tokens=out, counts=np.minimum(depths, K), probs=q_all)

    def _known(self) -> np.ndarray:
        """[B] each row's history length: every token committed but the pending rounds'."""
        return np.array([len(h) for h in self.histories], dtype=np.int64)

    def _window(self, known: np.ndarray) -> tuple[mx.array, mx.array, np.ndarray | None]:
        """Each row's unfed tokens back to back: host tokens history[exact_len:known], then
        every pending verify's valid ones. Returns tokens [B, W] int32, counts [B] int32
        (device) and the counts on the host when nothing is pending."""
        host = [h[int(a) : int(b)] for h, a, b in zip(self.histories, self.exact_len,
                                                      known)]  # fmt: skip
        host_tokens, host_count = pad_windows(host)  # [B, Wh], [B]
        if not self.pending:
            return mx.array(host_tokens), mx.array(host_count.astype(np.int32)), host_count
        B, Wh = host_tokens.shape
        W = Wh + sum(p.tokens.shape[1] for p in self.pending)
        W = -(-W // self.pad_packed_to) * self.pad_packed_to
        tokens = mx.pad(mx.array(host_tokens), [(0, 0), (0, W - Wh)])
        offset = mx.array(host_count.astype(np.int32))  # [B] where the next part starts
        for p in self.pending:
            idx = offset[:, None] + mx.arange(p.tokens.shape[1])[None]  # [B, P]
            tokens = mx.put_along_axis(tokens, idx, p.tokens.astype(mx.int32), axis=1)
            offset = offset + p.count
        return tokens, offset, None

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        """Roll the round's chained drafts and its window's last token back; the tokens of a
        verify the host has not read yet (device counts) wait as a pending entry."""
        if self._drafted:
            self.cache.rollback(np.full(self.cache.num_rows, self._chained + 1, dtype=np.int64))
            self._drafted = False
        if isinstance(num_accepted, np.ndarray):
            return  # a round the host has read: its tokens are in the histories at next propose
        if not isinstance(num_accepted, mx.array) or not isinstance(tokens, mx.array):
            raise ValueError("ModelDrafter.commit needs the committed tokens with device counts")
        self.pending.append(Pending(tokens.astype(mx.int32), num_accepted.astype(mx.int32) + 1))
