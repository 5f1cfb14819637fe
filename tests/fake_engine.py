"""The plumbing both test-only engines share (the `EngineLike` protocol of
workers/service/engine_loop.py: the slice of Engine that EngineLoop calls): a
waiting queue, at most max_batch_size running rows, abort as a flag the next step turns into an
"abort" finish, has_work, info and round stats, a step delay standing in for compute.

Subclasses choose the tokens of each step (`_advance`) and may add to each output; their
rules differ on purpose: tests/cluster/fake_engine.py (a hash of the committed prefix, for
exactly-once resumes), tests/workers/service/fake_engine.py (last + 1, for transport tests).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from workers.types import EngineInfo, RequestOutput, RoundStats, SamplingParams


@dataclass
class FakeRow:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    tokens: list[int] = field(default_factory=list)  # output so far
    aborted: bool = False
    cached: int = 0  # prompt tokens a prefix cache would hold (see FakeEngineBase.add_request)


class FakeEngineBase:
    drafter = "fake"
    draft_depth = 2

    def __init__(
        self, vocab_size: int, max_batch_size: int, max_context: int, step_delay_s: float
    ) -> None:
        self.vocab_size = vocab_size
        self.max_batch_size = max_batch_size
        self.max_context = max_context
        self.step_delay_s = step_delay_s
        self._lock = threading.Lock()
        self._waiting: deque[FakeRow] = deque()
        self._running: dict[str, FakeRow] = {}
        self._ids: set[str] = set()
        self._stats: list[RoundStats] = []
        self._round = 0
        self.num_added = 0
        self._seen_prompts: list[list[int]] = []  # a toy prefix cache: every prompt admitted
        self.fail_next_step = False  # set by tests to simulate a fatal engine error

    # -- what subclasses decide -----------------------------------------------------------------
    def _advance(self, row: FakeRow) -> list[int]:
        """The row's new tokens this round (at most max_tokens in all)."""
        raise NotImplementedError

    def _output(self, row: FakeRow, new: list[int]) -> RequestOutput:
        return RequestOutput(
            request_id=row.request_id,
            new_tokens=new,
            num_prompt_tokens=len(row.prompt),
            num_generated_tokens=len(row.tokens),
            num_cached_tokens=row.cached,
        )

    def _account(self, stats: RoundStats, new: list[int]) -> None:
        """Round stats for one row's new tokens (none by default)."""

    # -- EngineLike (workers/service/engine_loop.py) ---------------------------------------------
    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise ValueError(f"prompt for {request_id!r} is empty: pass at least one token")
        if len(prompt) + params.max_tokens > self.max_context:
            raise ValueError(
                f"prompt length {len(prompt)} + max_tokens exceeds max_context={self.max_context}"
            )
        if any(not 0 <= t < self.vocab_size for t in prompt):
            raise ValueError("prompt token ids outside the vocabulary")
        with self._lock:
            if request_id in self._ids:
                raise ValueError(f"duplicate request id {request_id!r}")
            self._ids.add(request_id)
            self.num_added += 1
            # As a worker's prefix cache: the longest prefix shared with an earlier prompt, but
            # never the last token (the next verify consumes it).
            cached = max((_common(prompt, p) for p in self._seen_prompts), default=0)
            self._seen_prompts.append(list(prompt))
            row = FakeRow(request_id, list(prompt), params, cached=min(cached, len(prompt) - 1))
            self._waiting.append(row)

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
                new = self._advance(row)
                row.tokens += new
                self._account(stats, new)
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

    def _finish(self, row: FakeRow, new: list[int], reason: str) -> RequestOutput:
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
                drafter=self.drafter,
                draft_depth=self.draft_depth,
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


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
