"""A test-only engine (ENGINE_API contract) for scheduler tests, where the model is not what is
under test. The next token is a hash of the last four tokens and the absolute position, so a
resumed request only matches a no-fault run if it resumes from exactly the committed prefix.
Each round emits 1-3 tokens per row, like a speculative engine."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from workers.types import EngineInfo, RequestOutput, RoundStats, SamplingParams

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


@dataclass
class _Row:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    out: list[int] = field(default_factory=list)
    aborted: bool = False


class FakeEngine:
    def __init__(
        self, max_batch_size: int = 8, max_context: int = 2048, step_delay_s: float = 0.002
    ):
        self.max_batch_size, self.max_context, self.step_delay_s = (
            max_batch_size,
            max_context,
            step_delay_s,
        )
        self._lock = threading.Lock()
        self._waiting: deque[_Row] = deque()
        self._running: dict[str, _Row] = {}
        self._round = 0
        self.num_added = 0

    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        if len(prompt) >= self.max_context:
            raise ValueError(f"prompt length {len(prompt)} exceeds max_context={self.max_context}")
        if any(not 0 <= t < VOCAB for t in prompt):
            raise ValueError("prompt token ids outside the vocabulary")
        with self._lock:
            self.num_added += 1
            self._waiting.append(_Row(request_id, list(prompt), params))

    def abort(self, request_id: str) -> None:
        with self._lock:
            for row in [*self._waiting, *self._running.values()]:
                if row.request_id == request_id:
                    row.aborted = True

    def has_work(self) -> bool:
        with self._lock:
            return bool(self._waiting or self._running)

    def step(self) -> list[RequestOutput]:
        time.sleep(self.step_delay_s)
        with self._lock:
            while self._waiting and len(self._running) < self.max_batch_size:
                row = self._waiting.popleft()
                self._running[row.request_id] = row
        self._round += 1
        outs = []
        for rid, row in list(self._running.items()):
            if row.aborted:
                outs.append(RequestOutput(rid, [], True, "abort"))
                del self._running[rid]
                continue
            k = 1 + (self._round + len(row.out)) % 3
            new = []
            for _ in range(min(k, row.params.max_tokens - len(row.out))):
                tok = next_token(row.prompt + row.out)
                row.out.append(tok)
                new.append(tok)
            done = len(row.out) >= row.params.max_tokens
            outs.append(
                RequestOutput(
                    rid,
                    new,
                    done,
                    "length" if done else None,
                    new_logprobs=fake_logprobs(new) if row.params.logprobs else None,
                    num_prompt_tokens=len(row.prompt),
                    num_generated_tokens=len(row.out),
                    num_draft_tokens=3 * len(row.out),
                    num_accepted_tokens=2 * len(row.out),
                )
            )
            if done:
                del self._running[rid]
        return outs

    def info(self) -> EngineInfo:
        with self._lock:
            return EngineInfo(
                model_id="fake",
                vocab_size=VOCAB,
                max_context=self.max_context,
                drafter="none",
                draft_depth=3,
                max_batch_size=self.max_batch_size,
                num_running=len(self._running),
                num_waiting=len(self._waiting),
                free_slots=max(0, self.max_batch_size - len(self._running) - len(self._waiting)),
                kv_budget_tokens=self.max_batch_size * self.max_context,
                kv_used_tokens=0,
            )

    def take_round_stats(self) -> list[RoundStats]:
        return []
