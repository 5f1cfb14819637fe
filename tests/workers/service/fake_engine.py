"""A test-only engine implementing `EngineLike` (workers/service/engine_loop.py), for transport
tests (auth, TLS, fuzzing, limits) where the model is not what is under test.

Row r continues its prompt with (last + 1) % vocab, emitting 1 + (round % 3) tokens per
round as a speculative engine does, so deltas vary in size. `step_delay_s` stands in for
compute so cancels land mid-generation.
"""

from __future__ import annotations

from tests.fake_engine import FakeEngineBase, FakeRow
from workers.types import RoundStats


def expected_tokens(prompt: list[int], max_tokens: int, vocab_size: int = 256) -> list[int]:
    out, last = [], prompt[-1]
    for _ in range(max_tokens):
        last = (last + 1) % vocab_size
        out.append(last)
    return out


class FakeEngine(FakeEngineBase):
    def __init__(
        self,
        vocab_size: int = 256,
        max_batch_size: int = 4,
        max_context: int = 512,
        step_delay_s: float = 0.0,
    ) -> None:
        super().__init__(vocab_size, max_batch_size, max_context, step_delay_s)

    def _advance(self, row: FakeRow) -> list[int]:
        # expected_tokens(...)[done : done + n], without building the whole list each round.
        done = len(row.tokens)
        end = min(done + 1 + self._round % 3, row.params.max_tokens)
        return [(row.prompt[-1] + i + 1) % self.vocab_size for i in range(done, end)]

    def _account(self, stats: RoundStats, new: list[int]) -> None:
        # Two drafts per row per round, len(new) - 1 of them accepted.
        stats.num_drafts += 1
        stats.num_draft_tokens += 2
        stats.num_accepted_tokens += len(new) - 1
        stats.accepted_per_pos += [0] * (2 - len(stats.accepted_per_pos))
        for i in range(len(new) - 1):
            stats.accepted_per_pos[i] += 1
        stats.num_generated_tokens += len(new)
