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

import mlx.core as mx
import numpy as np

from workers import launch
from workers.backend import Backend
from workers.compiled_step import COMPILE_ENV
from workers.drafters.base import DraftRequest, greedy_select
from workers.drafters.mtp import MTPDrafter
from workers.drafters.mtp_pairs import Pairs
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

    # -- the round's steps on the host (MTPDrafter runs the rounds and their bookkeeping) -----
    def _new_cache(self, n: int) -> HostCache:  # type: ignore[override]
        return HostCache(n, self.host.nk, self.host.d)

    def _pairs_hidden(self, hidden: mx.array) -> np.ndarray:  # type: ignore[override]
        return np.array(hidden, dtype=np.float32)  # read back once a join: [n, P, H]

    def _prompt_pairs(  # type: ignore[override]
        self, new: HostCache, hidden: np.ndarray, tokens: np.ndarray, valid: np.ndarray
    ) -> None:
        """A chunk of the joiners' prompt pairs: their keys and values only (no query); a
        row's padding is written past its length."""
        W = tokens.shape[1]
        if hidden.shape[1] < W:  # the chunk's hidden ends before its longest window
            hidden = np.pad(hidden, [(0, 0), (0, W - hidden.shape[1]), (0, 0)])
        self.host.step(hidden, tokens, new, None)
        new.lengths += valid

    def _absorb(self) -> tuple[np.ndarray, np.ndarray] | None:  # type: ignore[override]
        """Run every backlogged verified pair into the host cache in one step; returns the
        chain [B, 1, H] and the logits [B, V] at each row's last pair."""
        pairs = self._take_backlog()
        if pairs is None:
            return None
        mx.eval(pairs.hidden, pairs.tokens, pairs.count)  # one wait for the verify (see above)
        hidden = np.array(pairs.hidden, dtype=np.float32)
        tokens = np.array(pairs.tokens, dtype=np.int64)
        count = _host_count(pairs)
        chain, normed = self.host.step(hidden, tokens, self.cache, np.maximum(count - 1, 0))
        self.cache.lengths += count
        return chain, self.host.logits(normed[:, 0])

    def _select(  # type: ignore[override]
        self, request: DraftRequest, logits: np.ndarray, step: int
    ) -> tuple[np.ndarray, mx.array | None]:
        """Greedy drafts are the host's argmax; sampled ones come from the request's own
        selector, with the distribution q they were drawn from."""
        if request.select is greedy_select:
            return logits.argmax(axis=-1), None
        chosen, q = request.select(mx.array(logits), step)
        return np.array(chosen, dtype=np.int64), q

    def _chain(  # type: ignore[override]
        self, chain: np.ndarray, chosen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        at_first = np.zeros(len(chosen), dtype=np.int64)  # a chained step's one pair per row
        chain, normed = self.host.step(chain, chosen[:, None], self.cache, at_first)
        self.cache.lengths += 1
        return chain, self.host.logits(normed[:, 0])

    def _stack(self, drafted: list) -> mx.array:
        return mx.array(np.stack(drafted, axis=1).astype(np.int32))  # [B, K] to the device

    def compile_steps(self) -> None:
        raise ValueError(
            "HostMTPDrafter runs its head in NumPy: there are no MLX steps to compile; for "
            "compiled MLX head steps use MTPDrafter (SPECFLEET_HOST_MTP=0)"
        )


def _host_count(pairs: Pairs) -> np.ndarray:
    if pairs.count_host is not None:
        return np.asarray(pairs.count_host, dtype=np.int64)
    return np.array(pairs.count, dtype=np.int64)
