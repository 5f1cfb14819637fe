"""Admission checks: turn a request's input into token ids and refuse what no worker can run,
with messages that name the value and the fix (INVALID_ARGUMENT)."""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass

from cluster.policy import PendingRequest
from cluster.prefix_affinity import prefix_key
from cluster.requests import INVALID_ARGUMENT, GenerateInput, RequestState, SchedulerError
from cluster.tokenizer import TextTokenizer
from contract.types import EngineInfo

MAX_PROMPT_CHARS = 4 * 1024 * 1024
MAX_PROMPT_TOKENS = 1 << 20


def tokenize_input(inp: GenerateInput, tokenizer: TextTokenizer | None) -> list[int]:
    if (inp.prompt is None) == (inp.messages is None):
        raise SchedulerError(INVALID_ARGUMENT, "pass exactly one of prompt or messages")
    if inp.messages is not None or isinstance(inp.prompt, str):
        if tokenizer is None:
            raise SchedulerError(
                INVALID_ARGUMENT,
                "text prompt given but the scheduler has no tokenizer: pass token ids or "
                "start the cluster with --tokenizer/--model",
            )
        if inp.messages is not None:
            try:
                text = tokenizer.apply_chat_template(inp.messages)
            except Exception as e:  # template errors are the caller's messages' fault
                raise SchedulerError(INVALID_ARGUMENT, f"messages: {e}") from None
        else:
            text = str(inp.prompt)
        if len(text) > MAX_PROMPT_CHARS:
            raise SchedulerError(
                INVALID_ARGUMENT,
                f"prompt has {len(text)} characters, over the {MAX_PROMPT_CHARS} limit",
            )
        tokens = tokenizer.encode(text)
    else:
        tokens = list(inp.prompt or [])
    if not tokens:
        raise SchedulerError(INVALID_ARGUMENT, "prompt is empty: pass at least one token")
    if len(tokens) > MAX_PROMPT_TOKENS:
        raise SchedulerError(
            INVALID_ARGUMENT, f"prompt has {len(tokens)} tokens, over {MAX_PROMPT_TOKENS}"
        )
    return tokens


@dataclass(frozen=True)
class EngineLimits:
    """The largest vocabulary, context and KV budget among the workers seen so far: a request
    is admitted when some worker could run it, so only these maxima matter. The scheduler
    recomputes them when a worker connects, not per request."""

    vocab_size: int
    max_context: int
    kv_budget_tokens: int

    @classmethod
    def of(cls, known: list[EngineInfo]) -> EngineLimits | None:
        if not known:
            return None
        return cls(
            max(e.vocab_size for e in known),
            max(e.max_context for e in known),
            max(e.kv_budget_tokens for e in known),
        )


def check_fits(
    prompt: list[int], max_tokens: int, kv_need: int, limits: EngineLimits | None
) -> None:
    """Raise unless some known worker could run this request (no worker known yet: accept;
    the worker validates at dispatch)."""
    if limits is None:
        return
    n = len(prompt)
    vocab = limits.vocab_size
    if min(prompt) < 0 or max(prompt) >= vocab:
        bad = [t for t in prompt if not 0 <= t < vocab]
        raise SchedulerError(
            INVALID_ARGUMENT, f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab})"
        )
    if n >= limits.max_context:
        raise SchedulerError(
            INVALID_ARGUMENT,
            f"prompt length {n} leaves no room in the context of "
            f"{limits.max_context} tokens: shorten the prompt",
        )
    if kv_need > limits.kv_budget_tokens:
        raise SchedulerError(
            INVALID_ARGUMENT,
            f"prompt length {n} + max_tokens {max_tokens} exceeds every worker's KV budget: "
            "lower max_tokens or shorten the prompt",
        )


def pending_request(state: RequestState, limits: EngineLimits | None) -> PendingRequest:
    """What the policy queues for a request: its committed prefix as prompt, and as many new
    tokens as the largest context leaves room for (the engine reserves at most this)."""
    n = len(state.prompt) + len(state.tokens)
    room = limits.max_context - n if limits else state.remaining
    return PendingRequest(
        request_id=state.request_id,
        num_prompt_tokens=n,
        max_tokens=max(1, min(state.remaining, room)),
        arrival=state.arrival,
        priority=state.priority,
        deadline=state.deadline,
        prefix_key=prefix_key(state.prompt),
    )


def new_request_state(
    request_id: str, inp: GenerateInput, tokenizer: TextTokenizer | None, now: float
) -> RequestState:
    """A submitted request's state: prompt tokenized, timeout checked, sampling seed fixed."""
    if inp.timeout_s is not None and inp.timeout_s <= 0:
        raise SchedulerError(INVALID_ARGUMENT, f"timeout_s={inp.timeout_s}: use > 0")
    prompt = tokenize_input(inp, tokenizer)
    params = inp.params
    if params.temperature > 0 and params.seed is None:
        # Fix the seed once here: every attempt (after a requeue too) then draws the same
        # position-keyed noise, so a resumed sampled request continues as if uninterrupted.
        params = dataclasses.replace(params, seed=secrets.randbits(63))
    return RequestState(
        request_id=request_id,
        prompt=prompt,
        params=params,
        priority=inp.priority,
        arrival=now,
        deadline=None if inp.timeout_s is None else now + inp.timeout_s,
        detok=tokenizer.detokenizer() if tokenizer else None,
    )
