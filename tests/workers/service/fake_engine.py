"""A test-only engine that follows the ENGINE_API contract, for transport-level tests
(auth, TLS, fuzzing, limits) where the model is not what is under test.

Row r continues its prompt with (last + 1) % vocab, emitting 1 + (round % 3) tokens per
round as a speculative engine does, so deltas vary in size. `step_delay_s` stands in for
compute so cancels land mid-generation.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from workers.types import EngineInfo, RequestOutput, RoundStats, SamplingParams


@dataclass
class _Row:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    tokens: list[int] = field(default_factory=list)
    aborted: bool = False


def expected_tokens(prompt: list[int], max_tokens: int, vocab_size: int = 256) -> list[int]:
    out, last = [], prompt[-1]
    for _ in range(max_tokens):
        last = (last + 1) % vocab_size
        out.append(last)
    return out


class FakeEngine:
    def __init__(
        self,
        vocab_size: int = 256,
        max_batch_size: int = 4,
        max_context: int = 512,
        step_delay_s: float = 0.0,
    ) -> None:
        self.vocab_size = vocab_size
        self.max_batch_size = max_batch_size
        self.max_context = max_context
        self.step_delay_s = step_delay_s
        self._lock = threading.Lock()
        self._waiting: deque[_Row] = deque()
        self._running: dict[str, _Row] = {}
        self._ids: set[str] = set()
        self._stats: list[RoundStats] = []
        self._round = 0
        self.fail_next_step = False  # set by tests to simulate a fatal engine error

    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise ValueError(f"prompt for {request_id!r} is empty: pass at least one token")
        if len(prompt) + params.max_tokens > self.max_context:
            raise ValueError(
                f"prompt length {len(prompt)} + max_tokens exceeds max_context={self.max_context}"
            )
        with self._lock:
            if request_id in self._ids:
                raise ValueError(f"duplicate request id {request_id!r}")
            self._ids.add(request_id)
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
        if self.fail_next_step:
            raise RuntimeError("simulated fatal engine error")
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        outs: list[RequestOutput] = []
        with self._lock:
            stats = RoundStats()
            while self._waiting and len(self._running) < self.max_batch_size:
                row = self._waiting.popleft()
                self._running[row.request_id] = row
                stats.num_prefill_tokens += len(row.prompt)
            self._round += 1
            stats.batch_size = len(self._running)
            for row in list(self._running.values()):
                if row.aborted:
                    outs.append(self._finish(row, [], "abort"))
                    continue
                want = expected_tokens(row.prompt, row.params.max_tokens, self.vocab_size)
                n = 1 + self._round % 3
                new = want[len(row.tokens) : len(row.tokens) + n]
                row.tokens += new
                stats.num_drafts += 1
                stats.num_draft_tokens += 2
                stats.num_accepted_tokens += len(new) - 1
                stats.accepted_per_pos += [0] * (2 - len(stats.accepted_per_pos))
                for i in range(len(new) - 1):
                    stats.accepted_per_pos[i] += 1
                stats.num_generated_tokens += len(new)
                if len(row.tokens) >= row.params.max_tokens:
                    outs.append(self._finish(row, new, "length"))
                else:
                    outs.append(self._output(row, new))
            # Rows aborted while waiting finish without running.
            for row in [r for r in self._waiting if r.aborted]:
                self._waiting.remove(row)
                outs.append(self._finish(row, [], "abort"))
            self._stats.append(stats)
        return outs

    def _output(self, row: _Row, new: list[int]) -> RequestOutput:
        return RequestOutput(
            request_id=row.request_id,
            new_tokens=new,
            num_prompt_tokens=len(row.prompt),
            num_generated_tokens=len(row.tokens),
        )

    def _finish(self, row: _Row, new: list[int], reason: str) -> RequestOutput:
        self._running.pop(row.request_id, None)
        self._ids.discard(row.request_id)
        out = self._output(row, new)
        out.finished, out.finish_reason = True, reason  # type: ignore[assignment]
        return out

    def info(self) -> EngineInfo:
        with self._lock:
            return EngineInfo(
                model_id="fake",
                vocab_size=self.vocab_size,
                max_context=self.max_context,
                drafter="fake",
                draft_depth=2,
                max_batch_size=self.max_batch_size,
                num_running=len(self._running),
                num_waiting=len(self._waiting),
                free_slots=self.max_batch_size - len(self._running),
                kv_budget_tokens=self.max_batch_size * self.max_context,
                kv_used_tokens=sum(len(r.prompt) + len(r.tokens) for r in self._running.values()),
            )

    def take_round_stats(self) -> list[RoundStats]:
        with self._lock:
            stats, self._stats = self._stats, []
            return stats
