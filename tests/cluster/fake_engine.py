"""A test-only engine (`EngineLike`, workers/service/engine_loop.py) for scheduler tests, where
the model is not what is under test. The next token is a hash of the last four tokens and the absolute position, so a
resumed request only matches a no-fault run if it resumes from exactly the committed prefix.
Each round emits 1-3 tokens per row, like a speculative engine."""

from __future__ import annotations

from tests.fake_engine import FakeEngineBase, FakeRow
from workers.types import RequestOutput

VOCAB = 256


def next_token(prefix: list[int]) -> int:
    h = len(prefix) * 1_000_003
    for t in prefix[-4:]:
        h = (h * 31 + t + 7) % 2_147_483_647
    return h % (VOCAB - 1)  # never VOCAB-1


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    seq = list(prompt)
    for _ in range(max_tokens):
        seq.append(next_token(seq))
    return seq[len(prompt) :]


def fake_logprobs(tokens: list[int]) -> list[float]:
    return [-t / 256 for t in tokens]


class FakeEngine(FakeEngineBase):
    drafter = "none"
    draft_depth = 3

    def __init__(
        self, max_batch_size: int = 8, max_context: int = 2048, step_delay_s: float = 0.002
    ):
        super().__init__(VOCAB, max_batch_size, max_context, step_delay_s)

    def _advance(self, row: FakeRow) -> list[int]:
        k = 1 + (self._round + len(row.tokens)) % 3
        seq = row.prompt + row.tokens
        for _ in range(min(k, row.params.max_tokens - len(row.tokens))):
            seq.append(next_token(seq))
        return seq[len(row.prompt) + len(row.tokens) :]

    def _output(self, row: FakeRow, new: list[int]) -> RequestOutput:
        out = super()._output(row, new)
        out.new_logprobs = fake_logprobs(new) if row.params.logprobs else None
        out.num_draft_tokens = 3 * len(row.tokens)
        out.num_accepted_tokens = 2 * len(row.tokens)
        return out
