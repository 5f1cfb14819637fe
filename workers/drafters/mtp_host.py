"""MTP-head drafter whose head steps run in NumPy on the host (MLX's CPU backend).

The same drafter as workers/drafters/mtp.py, round for round: the verified pairs of each
verify wait in a backlog of lazy arrays (rounds that draft nothing cost no head step), the
first step of a drafting round absorbs them as one window, later depths chain the head's own
output, and chained entries are dropped at commit. What differs is where a step runs: the
head's weights and its KV cache are NumPy arrays (workers/mtp/host_head.py), and a drafting
round reads the last verify's pairs back before it steps. On MLX's CPU backend that read waits
only for the tail of the round the last launch already computed (`Backend.computes_in_launch`),
and the step itself costs a fraction of MLX's (host_head.py's docstring). Elsewhere (a GPU) the
read would stall the pipeline, so only the CPU gets this drafter (workers/loading.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from workers import launch
from workers.backend import Backend
from workers.compiled_step import COMPILE_ENV
from workers.drafters.base import DraftRequest, Proposal, empty_proposal, greedy_select
from workers.drafters.mtp import MTPDrafter, Pairs, hold_last_pairs
from workers.mtp.host_head import HostCache, HostHead

# "1" / "0": run MTP heads' steps on the host or not (unset: where MLX computes in launch, the
# CPU, and HostHead can run the head).
ENV = "SPECFLEET_HOST_MTP"


def host_head_wanted(drafter: MTPDrafter) -> bool:
    """Whether `drafter`'s head should run on the host: the environment's "1" / "0", else on
    MLX's CPU backend; never for a head HostHead cannot run, where the head's steps are to run
    as compiled MLX graphs (SPECFLEET_COMPILE_DRAFT), or where rounds may launch from a
    launcher thread: these keep MLX's steps."""
    backend = Backend.current()
    if HostHead.unsupported_reason(drafter.head, drafter.target) or backend.wants(COMPILE_ENV):
        return False
    if launch.rows_min(backend) is not None:  # rounds launched from a launcher thread: its
        return False  # arrays are read through tickets only (workers/launch.py), not here
    return backend.wants(ENV, default=backend.computes_in_launch)


class HostMTPDrafter(MTPDrafter):
    """MTPDrafter's membership, backlog and commit (HostCache has BatchCache's rollback,
    reset_rows and tighten); its head steps in NumPy (HostHead)."""

    cache: HostCache  # type: ignore[assignment]  # the host's, not MLX's ragged BatchCache

    def __init__(
        self, target: object, head: object, prefill_step_size: int = 512, prompt_window: int = 64
    ):
        super().__init__(target, head, prefill_step_size, prompt_window)
        self.host = HostHead(head, target)
        self.cache = HostCache(0, self.host.nk, self.host.d)

    @classmethod
    def from_mtp(cls, drafter: MTPDrafter) -> HostMTPDrafter:
        return cls(drafter.target, drafter.head, drafter.prefill_step_size, drafter.prompt_window)

    # -- membership -----------------------------------------------------------------------------
    def add_rows(self, histories: Sequence[Sequence[int]], hidden: mx.array | None = None) -> None:
        """Run each prompt's last `prompt_window` pairs into a new row of the host cache."""
        n = len(histories)
        new = HostCache(n, self.host.nk, self.host.d)
        held = None
        if hidden is not None:
            # Pair t: (h_t, x_{t+1}) for the hidden positions the engine handed over (see
            # MTPDrafter.add_rows), right-padded; a row's padding is written past its length.
            starts = [max(0, len(h) - 1 - self.prompt_window) for h in histories]
            hidden = self._head_hidden(hidden)
            h_all = np.array(hidden, dtype=np.float32)  # [n, P, H]
            nexts = [list(h[s + 1 :]) for h, s in zip(histories, starts)]
            longest = max(len(x) for x in nexts)
            for start in range(0, longest, self.prefill_step_size):
                windows = [x[start : start + self.prefill_step_size] for x in nexts]
                valid = np.array([len(w) for w in windows], dtype=np.int64)
                W = int(valid.max())
                tokens = np.zeros((n, W), dtype=np.int64)
                for r, w in enumerate(windows):
                    tokens[r, : len(w)] = w
                h = h_all[:, start : start + W]
                if h.shape[1] < W:
                    h = np.pad(h, [(0, 0), (0, W - h.shape[1]), (0, 0)])
                self.host.step(h, tokens, new, None)  # their keys and values only
                new.lengths += valid
            held = hold_last_pairs(new, hidden, nexts)
        self.cache.append(new)
        self._joined(histories, held)

    # -- the round ------------------------------------------------------------------------------
    def propose(self, request: DraftRequest) -> Proposal:
        """Chain the head K steps for every row on the host; the drafts go to the device as a
        [B, K] array (and, for sampled drafts, their distributions q [B, K, V])."""
        self.histories = list(request.histories)
        depths = np.asarray(request.depths, dtype=np.int64) * self.ready  # 0 where not ready
        B, K = len(depths), int(depths.max(initial=0))
        if K == 0:
            return empty_proposal(B)
        first = self._absorb_host()
        if first is None:
            return empty_proposal(B)
        chain, logits = first  # [B, 1, H], [B, V] at each row's last valid pair
        drafted, probs = [], []
        at_first = np.zeros(B, dtype=np.int64)  # a chained step's one pair per row
        for step in range(K):
            chosen, q = _select(request, logits, step)  # [B] int64, [B, V] | None
            drafted.append(chosen)
            probs.append(q)
            if step + 1 < K:  # chain: the head's own output and draft feed the next depth
                chain, normed = self.host.step(chain, chosen[:, None], self.cache, at_first)
                self.cache.lengths += 1  # chained entries are dropped again at commit
                logits = self.host.logits(normed[:, 0])
        self._chained = np.full(B, K - 1, dtype=np.int64)
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        tokens = mx.array(np.stack(drafted, axis=1).astype(np.int32))
        return Proposal(tokens=tokens, counts=depths, probs=q_all)

    def _absorb_host(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Run every backlogged verified pair into the host cache in one step; returns the
        chain [B, 1, H] and the logits [B, V] at each row's last pair."""
        pairs = self._take_backlog()
        if pairs is None:
            return None
        hidden = np.array(pairs.hidden, dtype=np.float32)  # waits for the verify (see above)
        tokens = np.array(pairs.tokens, dtype=np.int64)
        count = _host_count(pairs)
        chain, normed = self.host.step(hidden, tokens, self.cache, np.maximum(count - 1, 0))
        self.cache.lengths += count
        return chain, self.host.logits(normed[:, 0])

    def compile_steps(self) -> None:
        raise ValueError(
            "HostMTPDrafter runs its head in NumPy: there are no MLX steps to compile; for "
            "compiled MLX head steps use MTPDrafter (SPECFLEET_HOST_MTP=0)"
        )


def _host_count(pairs: Pairs) -> np.ndarray:
    if pairs.count_host is not None:
        return np.asarray(pairs.count_host, dtype=np.int64)
    return np.array(pairs.count, dtype=np.int64)


def _select(
    request: DraftRequest, logits: np.ndarray, step: int
) -> tuple[np.ndarray, mx.array | None]:
    """The request's draft choice on host logits [B, V]: greedy on the host, sampled (with the
    distribution q it drew from) by the request's own selector."""
    if request.select is greedy_select:
        return logits.argmax(axis=-1), None
    chosen, q = request.select(mx.array(logits), step)
    return np.array(chosen, dtype=np.int64), q
