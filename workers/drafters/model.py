"""A separate small draft model (same vocabulary as the target), drafted for the whole batch.

The draft model keeps its own ragged per-row cache (workers.kv_cache). It is device-resident:
a round is built before the host has read the last one (workers/engine.py, pipelined rounds),
so what the cache has not been fed yet comes in two parts:

- host tokens: each row's history from `exact_len` (what the cache holds, exactly) on, and
- pending verifies: the unfed tokens of the rounds the host has not read yet (`Pending`:
  tokens and [B] device counts), at most the round being read and the one launched after it.

A drafting round feeds both as one window per row (host tokens, then each pending verify's
valid tokens back to back), drafts from the logits at the window's last valid token and chains
the other drafts one token at a time, all on the device. The chained drafts the verify accepts
stay in the cache (the rest are rolled back on the device), so a round leaves one or two
tokens unfed: the bonus token, after the last draft when every draft was accepted. Until the
host has read that round, how many drafts stayed is known only on the device: such a row's
`Chain` (the history length before the drafts, learnt at the next `tighten`, and how many
were fed) resolves into `exact_len` at the `tighten` that reads its round, and meanwhile the
row has no host tokens (its round's pending entry holds everything unfed).

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
        # Rows whose last drafting round is unread: [B] its launch number (-1: none), the
        # history length before its drafts (-1: learnt at the next tighten), drafts fed.
        self.chain_launch = np.zeros(0, dtype=np.int64)
        self.chain_base = np.zeros(0, dtype=np.int64)
        self.chain_fed = np.zeros(0, dtype=np.int64)
        self.pending: list[Pending] = []  # unread verifies, oldest first
        self.launches = 0  # rounds committed so far
        self._drafted = -1  # drafts fed after this round's window (-1: no window fed)
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

    # -- membership -------------------------------------------------------------------------------
    def add_rows(self, histories: Sequence[Sequence[int]], hidden: object = None) -> None:
        n = len(histories)
        self.cache.append(BatchCache.for_model(self.model, n))  # fed lazily: host tokens
        self.histories.extend(histories)
        none = np.full(n, -1, dtype=np.int64)
        self.exact_len = np.concatenate([self.exact_len, np.zeros(n, dtype=np.int64)])
        self.chain_launch = np.concatenate([self.chain_launch, none])
        self.chain_base = np.concatenate([self.chain_base, none])
        self.chain_fed = np.concatenate([self.chain_fed, np.zeros(n, dtype=np.int64)])
        self.pending = [p.with_rows_added(n) for p in self.pending]  # no tokens for joiners

    def keep_rows(self, keep: Sequence[int]) -> None:
        idx = list(keep)
        self.cache.keep_rows(idx)
        self.histories = [self.histories[i] for i in idx]
        self.exact_len, self.chain_fed = self.exact_len[idx], self.chain_fed[idx]
        self.chain_launch, self.chain_base = self.chain_launch[idx], self.chain_base[idx]
        self.pending = [p.with_rows(idx) for p in self.pending] if idx else []

    def tighten(self, bounds: np.ndarray, rows: np.ndarray, in_flight: bool = True) -> None:
        """The host has read every round but the one `in_flight`: their tokens are in the
        histories now (their pending entries go), a chain of a round read resolves, and a chain
        of the round in flight learns its base (what its window fed: the histories now)."""
        known = self._known()
        read = self.launches - int(in_flight)  # rounds 1..read are in the histories
        learn = (self.chain_launch > read) & (self.chain_base < 0)
        self.chain_base = np.where(learn, known, self.chain_base)
        done = (self.chain_launch >= 0) & (self.chain_launch <= read)
        assert (self.chain_base[done] >= 0).all(), "a chain resolved before its base was learnt"
        accepted = np.maximum(known - self.chain_base - 1, 0)  # the round's kept drafts, + bonus
        self.exact_len = np.where(done, self.chain_base + np.minimum(accepted, self.chain_fed),
                                  self.exact_len)  # fmt: skip
        self.chain_launch = np.where(done, -1, self.chain_launch)
        self.pending = self.pending[-1:] if in_flight else []
        open_ = self.chain_launch >= 0  # at most base + fed (the base is known by now)
        bound = np.where(open_, self.chain_base + self.chain_fed, self.exact_len)
        self.cache.tighten(bound, np.ones(len(known), dtype=bool), exact=not open_.any())

    # -- the round --------------------------------------------------------------------------------
    def propose(self, request: DraftRequest) -> Proposal:
        self.histories = list(request.histories)
        depths = np.asarray(request.depths, dtype=np.int64)
        B, K = len(depths), int(depths.max(initial=0))
        if K == 0:
            return empty_proposal(B)
        known = self._known()
        open_ = self.chain_launch >= 0  # unread chains: their pending entry holds the unfed
        assert (self.chain_base[open_] >= 0).all(), "a round drafted before the last was read"
        start = np.where(open_, known, self.exact_len)  # host tokens history[start:known]
        # Long host gaps (a prompt, a stretch of plain rounds) go in prefill chunks first,
        # all but the last token, which starts the window.
        behind = [h[int(a) : max(int(a), int(b) - 1)] for h, a, b in zip(self.histories, start,
                                                                        known)]  # fmt: skip
        if max(len(x) for x in behind) >= self.prefill_step_size:
            prefill(self.model, self.cache, behind, self.prefill_step_size)
            start = start + np.array([len(x) for x in behind])
            self.exact_len = np.where(open_, self.exact_len, start)
        tokens, count, host_count = self._window(start, known)
        W = tokens.shape[1]
        if host_count is not None:  # nothing pending: exact counts, and the base is known
            logits = forward_window(self.model, self.cache, tokens, host_count)
            self.cache.commit(host_count)
            base = known
        else:
            logits = forward_window(self.model, self.cache, tokens, np.full(B, W))
            self.cache.commit_lazy(count, W)
            base = np.full(B, -1, dtype=np.int64)  # learnt at the next tighten
        self.pending = []
        last = mx.maximum(count - 1, 0)[:, None, None]  # [B, 1, 1] each row's last valid token
        step_logits = mx.take_along_axis(logits, last, axis=1)[:, 0]  # [B, V]
        drafted, probs = [], []
        ones = np.ones(B, dtype=np.int64)
        for step in range(K):
            chosen, q = request.select(step_logits, step)
            drafted.append(chosen)
            probs.append(q)
            if step + 1 < K:  # fed tentatively: commit keeps the accepted ones
                step_logits = forward_window(self.model, self.cache, chosen[:, None], ones)[:, 0]
                self.cache.commit(ones)
        self._drafted = K - 1
        self.chain_launch = np.full(B, self.launches + 1, dtype=np.int64)  # this round
        self.chain_base, self.chain_fed = base, np.full(B, K - 1, dtype=np.int64)
        # [B, K] left lazy: the K steps run with the verify that consumes them, one launch and
        # one wait per round instead of a wait for the drafts and another for the verify.
        out = mx.stack(drafted, axis=1).astype(mx.int32)
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        return Proposal(tokens=out, counts=np.minimum(depths, K), probs=q_all)

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        """Keep the chained drafts the verify accepted, roll back the rest; the tokens this
        round left unfed, if the host has not read them (device counts), wait as an entry."""
        self.launches += 1
        fed, self._drafted = self._drafted, -1
        if isinstance(num_accepted, np.ndarray):  # read: the histories hold its tokens next
            if fed >= 0:
                assert (self.chain_base >= 0).all(), "a read round drafted from unread ones"
                kept = np.minimum(num_accepted, fed)
                self.cache.rollback(fed - kept)
                self.exact_len = self.chain_base + kept
                self.chain_launch = np.full(self.cache.num_rows, -1, dtype=np.int64)
            return
        if not isinstance(num_accepted, mx.array) or not isinstance(tokens, mx.array):
            raise ValueError("ModelDrafter.commit needs the committed tokens with device counts")
        a = num_accepted.astype(mx.int32)  # [B]
        tokens = tokens.astype(mx.int32)  # [B, K+1]: the first a + 1 committed
        if fed < 0:  # nothing fed this round: all a + 1 committed tokens are unfed
            self.pending.append(Pending(tokens, a + 1))
            return
        kept_mx = mx.minimum(a, fed)  # [B] chained drafts the verify accepted
        self.cache.rollback_lazy(fed - kept_mx)
        # Unfed: tokens kept .. a (the bonus, after the last draft if every one was accepted)
        idx = mx.minimum(kept_mx[:, None] + mx.arange(2)[None], tokens.shape[1] - 1)  # [B, 2]
        self.pending.append(Pending(mx.take_along_axis(tokens, idx, axis=1), a + 1 - kept_mx))

    def _known(self) -> np.ndarray:
        """[B] each row's history length: every token committed but the pending rounds'."""
        return np.array([len(h) for h in self.histories], dtype=np.int64)

    def _window(
        self, start: np.ndarray, known: np.ndarray
    ) -> tuple[mx.array, mx.array, np.ndarray | None]:
        """Each row's unfed tokens back to back: host tokens history[start:known], then every
        pending verify's valid ones. Returns tokens [B, W] int32, counts [B] int32 (device)
        and the counts on the host when nothing is pending."""
        host = [h[int(a) : int(b)] for h, a, b in zip(self.histories, start, known)]
        host_tokens, host_count = pad_windows(host)  # [B, Wh], [B]
        if not self.pending:
            return host_tokens, mx.array(host_count.astype(np.int32)), host_count
        B, Wh = host_tokens.shape
        W = Wh + sum(p.tokens.shape[1] for p in self.pending)
        W = -(-W // self.pad_packed_to) * self.pad_packed_to
        tokens = mx.pad(host_tokens, [(0, 0), (0, W - Wh)])
        offset = mx.array(host_count.astype(np.int32))  # [B] where the next part starts
        for p in self.pending:
            idx = offset[:, None] + mx.arange(p.tokens.shape[1])[None]  # [B, P]
            tokens = mx.put_along_axis(tokens, idx, p.tokens, axis=1)
            offset = offset + p.count
        return tokens, offset, None
