"""A drafter that proposes a known continuation: forced acceptance for benchmarks, and a
deterministic mix of accepts and rejects for tests (workers/drafters/base.py protocol).

With the target's own greedy output as the reference, every draft is accepted: a round's
throughput ceiling, whatever the model. With `corrupt_every=n`, the drafts at some positions
are replaced by another token, so accept counts differ across rows and rounds for any target
(tests of rollback and compaction use this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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

    def commit(
        self, num_accepted: object, hidden: object = None, tokens: object = None
    ) -> None:
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
