"""A drafter that proposes a known continuation: forced acceptance for benchmarks, and a
deterministic mix of accepts and rejects for tests (workers/drafters/base.py protocol).

With the target's own greedy output as the reference, every draft is accepted: a round's
throughput ceiling, whatever the model. With `corrupt_every=n`, the drafts at some positions
are replaced by another token, so accept counts differ across rows and rounds for any target
(tests of rollback and compaction use this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import mlx.core as mx
import numpy as np

from workers.drafters.base import DraftRequest, Proposal


class ForcedDrafter:
    name = "forced"
    needs_target_hidden = False
    device_resident = False

    def __init__(
        self,
        refs: Mapping[tuple[int, ...], Sequence[int]],  # prompt -> its reference continuation
        vocab: int,
        corrupt_every: int | None = None,  # None: never corrupt (forced acceptance)
    ) -> None:
        if not refs:
            raise ValueError("refs is empty: pass {prompt tuple: reference continuation}")
        if corrupt_every is not None and corrupt_every < 1:
            raise ValueError(f"corrupt_every={corrupt_every!r} is invalid: pass an int >= 1")
        self.refs, self.vocab, self.corrupt_every = dict(refs), vocab, corrupt_every
        self._rows: list[tuple[int, ...]] = []  # each batch row's prompt (a key of refs)

    def add_rows(self, histories: Sequence[Sequence[int]], hidden: object = None) -> None:
        for h in histories:
            known = [p for p in self.refs if tuple(h[: len(p)]) == p]
            if not known:
                raise ValueError(f"no reference continuation for a prompt starting {list(h[:8])}")
            self._rows.append(max(known, key=len))

    def keep_rows(self, keep: Sequence[int]) -> None:
        self._rows = [self._rows[i] for i in keep]

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        pass  # the position in the reference follows from the history's length

    def propose(self, request: DraftRequest) -> Proposal:
        depths = np.asarray(request.depths)
        tokens = np.zeros((len(depths), int(depths.max(initial=0))), dtype=np.int32)  # [B, K]
        counts = np.zeros(len(depths), dtype=np.int64)  # [B]
        for r, (h, k) in enumerate(zip(request.histories, depths, strict=True)):
            prompt = self._rows[r]
            pos = len(h) - len(prompt)
            cont = self.refs[prompt][pos : pos + int(k)]
            for j, t in enumerate(cont):
                tokens[r, j] = (t + 1) % self.vocab if self._corrupt(prompt, pos + j) else t
            counts[r] = len(cont)
        return Proposal(tokens=tokens, counts=counts)

    def _corrupt(self, prompt: tuple[int, ...], pos: int) -> bool:
        n = self.corrupt_every
        return n is not None and (sum(prompt) + 7 * pos) % n == 0


class DeviceForcedDrafter(ForcedDrafter):
    """Forced acceptance with no host work at all: the references live on the device and each
    row's position advances by its device-side accept count, so the engine pipelines rounds
    with it as with an MTP head (the zero-cost, always-right drafter of the efficiency bench).
    """

    device_resident = True

    def __init__(self, refs: Mapping[tuple[int, ...], Sequence[int]], vocab: int) -> None:
        super().__init__(refs, vocab)
        self._table = mx.zeros((0, 1), dtype=mx.int32)  # [B, T] each row's continuation
        self._pos = mx.zeros(0, dtype=mx.int32)  # [B] tokens of it already committed

    def add_rows(self, histories: Sequence[Sequence[int]], hidden: object = None) -> None:
        start = len(self._rows)
        super().add_rows(histories, hidden)
        new = [self.refs[p] for p in self._rows[start:]]
        width = max([self._table.shape[1], *(len(c) + 1 for c in new)])
        table = np.zeros((len(new), width), dtype=np.int32)
        for i, c in enumerate(new):
            table[i, : len(c)] = c
        old = mx.pad(self._table, [(0, 0), (0, width - self._table.shape[1])])
        self._table = mx.concatenate([old, mx.array(table)])
        pos = [len(h) - len(p) for h, p in zip(histories, self._rows[start:], strict=True)]
        self._pos = mx.concatenate([self._pos, mx.array(np.asarray(pos, dtype=np.int32))])

    def keep_rows(self, keep: Sequence[int]) -> None:
        super().keep_rows(keep)
        rows = mx.array(np.asarray(list(keep), dtype=np.int32))
        self._table, self._pos = self._table[rows], self._pos[rows]

    def propose(self, request: DraftRequest) -> Proposal:
        depths = np.asarray(request.depths, dtype=np.int64)
        K = int(depths.max(initial=0))
        idx = mx.minimum(self._pos[:, None] + mx.arange(K)[None], self._table.shape[1] - 1)
        return Proposal(tokens=mx.take_along_axis(self._table, idx, axis=1), counts=depths)

    def commit(self, num_accepted: object, hidden: object = None, tokens: object = None) -> None:
        n = num_accepted if isinstance(num_accepted, mx.array) else mx.array(num_accepted)
        self._pos = self._pos + n.astype(mx.int32) + 1
