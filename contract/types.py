"""Plain data crossing the engine's edge: request parameters, per-step outputs, stats.

Part of the shared contract (contract/__init__.py): nothing here imports mlx, grpc, ray or any
other specfleet package; the wire codecs, the scheduler and the engine all build these objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral
from typing import Literal, get_args

from contract.limits import (
    MAX_STOP_CHARS,
    MAX_STOP_SEQUENCES,
    MAX_STOP_TOKEN_IDS,
    MAX_STOP_TOKENS,
    MAX_TOKEN_ID,
)

MAX_DRAFT_DEPTH = 16
# How drafts are accepted when temperature > 0 (workers/sampling/round.py explains each).
AcceptanceMode = Literal["rejection", "coupled", "exact"]
ACCEPTANCE_MODES: tuple[str, ...] = get_args(AcceptanceMode)
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
    acceptance: AcceptanceMode = "rejection"
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
        for name in _FLOAT_FIELDS:  # True is an int to Python, never a temperature
            if isinstance(getattr(self, name), bool):
                raise bad(name, getattr(self, name), "pass a number, not a bool")
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
        object.__setattr__(self, "stop", _check_stops(self.stop))
        object.__setattr__(self, "stop_token_ids", _check_stop_token_ids(self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0


_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty")


def _is_token_id(t: object) -> bool:
    # numbers.Integral: numpy integers from a tokenizer or an engine's output count too.
    return isinstance(t, Integral) and not isinstance(t, bool) and 0 <= int(t) <= MAX_TOKEN_ID


def _check_stops(stop: object) -> tuple[str | tuple[int, ...], ...]:
    def bad(fix: str) -> ValueError:
        return ValueError(f"SamplingParams.stop={stop!r:.120} is invalid: {fix}")

    if isinstance(stop, (str, bytes)) or not isinstance(stop, (tuple, list)):
        raise bad("pass a list of strings or of token-id lists")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise bad(f"{len(stop)} stop sequences is over the limit of {MAX_STOP_SEQUENCES}")
    out: list[str | tuple[int, ...]] = []
    for i, s in enumerate(stop):
        if isinstance(s, str):
            if len(s) > MAX_STOP_CHARS:
                raise bad(f"stop[{i}] has {len(s)} characters, over the limit of {MAX_STOP_CHARS}")
            item: str | tuple[int, ...] = s
        elif isinstance(s, (tuple, list)):
            if len(s) > MAX_STOP_TOKENS:
                raise bad(f"stop[{i}] has {len(s)} token ids, over the limit of {MAX_STOP_TOKENS}")
            if not all(_is_token_id(t) for t in s):
                raise bad(f"stop[{i}]: token-id stops must hold ints in [0, 2**32)")
            item = tuple(int(t) for t in s)
        else:
            raise bad(f"stop[{i}] is a {type(s).__name__}: use a string or a list of token ids")
        if len(item) == 0:
            raise bad("stop sequences must be non-empty")
        out.append(item)
    return tuple(out)


def _check_stop_token_ids(ids: object) -> tuple[int, ...]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (tuple, list)):
        raise ValueError(
            f"SamplingParams.stop_token_ids={ids!r:.80} is invalid: pass a list of token ids"
        )
    if len(ids) > MAX_STOP_TOKEN_IDS or not all(_is_token_id(t) for t in ids):
        raise ValueError(
            f"SamplingParams.stop_token_ids={ids!r:.80} is invalid: pass at most "
            f"{MAX_STOP_TOKEN_IDS} ints in [0, 2**32)"
        )
    return tuple(int(t) for t in ids)


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
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache


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
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache


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
    draft_depth: int = 0  # the most drafts a row proposed this round (0: plain decoding)
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_compact_s: float = 0.0
    time_prefill_s: float = 0.0
    # Prefix cache (vLLM semantics, in tokens): prompt tokens looked up, found cached (their
    # prefill skipped: num_prefill_tokens counts them too), evicted; tokens held after the round.
    num_prefix_queried_tokens: int = 0
    num_prefix_hit_tokens: int = 0
    num_prefix_evicted_tokens: int = 0
    prefix_cache_used_tokens: int = 0


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
    # Prefix cache (workers/prefix_cache.py): capacity and use in tokens; state "on", "off" or
    # why the engine refused it ("recurrent_layers", ...).
    prefix_cache_tokens: int = 0
    prefix_cache_used_tokens: int = 0
    prefix_cache_state: str = "off"
