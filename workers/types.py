"""Plain data crossing the engine's edge: request parameters, per-step outputs, stats.

Nothing here imports mlx, grpc or ray: the service codec and the scheduler build these
objects too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

MAX_DRAFT_DEPTH = 16
ACCEPTANCE_MODES = ("rejection", "coupled", "exact")
FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding parameters; validated at creation, never mid-batch."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    # Each stop is a string (tokenized by the engine) or a sequence of token ids.
    stop: tuple[str | tuple[int, ...], ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    draft_depth: int | None = None
    # How drafts are accepted when temperature > 0 (greedy rows use exact match).
    acceptance: str = "rejection"
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    logprobs: bool = False
    # Trailing prompt tokens that are this request's own output from an earlier attempt: a
    # requeued request resends prompt + committed output as its prompt, and presence_penalty
    # must still count those tokens as output for the tokens to equal an uninterrupted run.
    num_resumed_tokens: int = 0

    @property
    def depth_invariant(self) -> bool:
        """Whether the tokens are the same at every draft depth (greedy, or coupled sampling),
        so the engine may change this row's depth round by round without changing its output."""
        return self.temperature == 0 or self.acceptance == "coupled"

    def __post_init__(self) -> None:
        def bad(name: str, value: object, fix: str) -> ValueError:
            return ValueError(f"SamplingParams.{name}={value!r} is invalid: {fix}")

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise bad("max_tokens", self.max_tokens, "pass a positive int")
        if self.max_tokens <= 0:
            raise bad("max_tokens", self.max_tokens, "pass max_tokens >= 1")
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature < math.inf:
            raise bad("temperature", self.temperature, "use 0 for greedy or a value > 0")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise bad("top_p", self.top_p, "use a value in (0, 1]; 1 disables it")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise bad("top_k", self.top_k, "use an int >= 0; 0 disables it")
        if not isinstance(self.min_p, (int, float)) or not (0.0 <= self.min_p < 1.0):
            raise bad("min_p", self.min_p, "use a value in [0, 1); 0 disables it")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise bad("seed", self.seed, "pass an int or None")
        if self.seed is not None and not (0 <= self.seed < 2**63):
            raise bad("seed", self.seed, "use an int in [0, 2**63)")
        if self.draft_depth is not None and (
            isinstance(self.draft_depth, bool)
            or not isinstance(self.draft_depth, int)
            or not (1 <= self.draft_depth <= MAX_DRAFT_DEPTH)
        ):
            raise bad(
                "draft_depth", self.draft_depth, f"use an int in 1..{MAX_DRAFT_DEPTH} or None"
            )
        if self.acceptance not in ACCEPTANCE_MODES:
            raise bad("acceptance", self.acceptance, f"use one of {ACCEPTANCE_MODES}")
        if not isinstance(self.repetition_penalty, (int, float)) or not (
            0 < self.repetition_penalty < math.inf
        ):
            raise bad(
                "repetition_penalty", self.repetition_penalty, "use a value > 0; 1 disables it"
            )
        if not isinstance(self.presence_penalty, (int, float)) or not math.isfinite(
            self.presence_penalty
        ):
            raise bad(
                "presence_penalty", self.presence_penalty, "use a finite float; 0 disables it"
            )
        if (
            isinstance(self.num_resumed_tokens, bool)
            or not isinstance(self.num_resumed_tokens, int)
            or self.num_resumed_tokens < 0
        ):
            raise bad(
                "num_resumed_tokens",
                self.num_resumed_tokens,
                "pass an int >= 0 (0 unless the prompt ends with earlier output)",
            )
        stops = tuple(s if isinstance(s, str) else tuple(s) for s in self.stop)
        for s in stops:
            if len(s) == 0:
                raise bad("stop", self.stop, "stop sequences must be non-empty")
            if not isinstance(s, str) and not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in s
            ):
                raise bad("stop", self.stop, "token-id stops must hold ints >= 0")
        object.__setattr__(self, "stop", stops)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0


@dataclass
class RequestOutput:
    """What one `Engine.step()` produced for one request: only the new tokens."""

    request_id: str
    new_tokens: list[int]
    finished: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    # Target log-probability of each new token, when SamplingParams.logprobs is set.
    new_logprobs: list[float] | None = None
    # Cumulative per request, so the last event carries the totals.
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass
class Completion:
    """A finished request as `Engine.generate` returns it."""

    request_id: str
    tokens: list[int]
    text: str
    finish_reason: FinishReason
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    logprobs: list[float] | None = None
    error: str | None = None


@dataclass
class RoundStats:
    """One engine round (prefill and/or one draft-verify step of the running batch)."""

    batch_size: int = 0
    num_prefill_tokens: int = 0
    # Per speculative row in this round: drafts proposed and drafts accepted.
    num_drafts: int = 0  # rows that drafted >= 1 token
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    # accepted_per_pos[i] counts rows whose draft at position i was accepted.
    accepted_per_pos: list[int] = field(default_factory=list)
    # Drafts accepted by each row of the batch this round, in batch order.
    accepted_per_row: list[int] = field(default_factory=list)
    num_generated_tokens: int = 0
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_compact_s: float = 0.0
    time_prefill_s: float = 0.0


@dataclass
class EngineInfo:
    """What a scheduler needs to size batches for this engine."""

    model_id: str
    vocab_size: int
    max_context: int
    drafter: str
    draft_depth: int
    max_batch_size: int
    num_running: int
    num_waiting: int
    free_slots: int
    kv_budget_tokens: int
    kv_used_tokens: int
    eos_token_ids: list[int] = field(default_factory=list)
