"""OpenAI-style request bodies in, OpenAI-style response bodies out (completions and chat).

Shared by the offline batch job and anything else that speaks the OpenAI shapes. Pure data:
no network, no tokenizer.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from contract.types import SamplingParams

COMPLETIONS_URL = "/v1/completions"
CHAT_URL = "/v1/chat/completions"
# Body keys mapped onto SamplingParams; "model", "n"=1 and "stream"=false are accepted and ignored.
_SAMPLING_KEYS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "draft_depth": "draft_depth",
    "acceptance": "acceptance",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "logprobs": "logprobs",
}
_IGNORED_KEYS = {"model", "n", "stream", "user", "priority"}


class BodyError(ValueError):
    """A request body that cannot be served; the message names the field and the fix."""


@dataclass
class ParsedBody:
    prompt: str | list[int] | None = None
    messages: list[dict[str, str]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    priority: int = 0
    is_chat: bool = False


@dataclass
class GenerationResult:
    """One finished request, whatever served it."""

    text: str
    finish_reason: str
    num_prompt_tokens: int
    num_generated_tokens: int
    tokens: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from a worker's prefix cache
    request_id: str = ""
    logprobs: list[float] | None = None  # [num_generated_tokens] when requested


def parse_body(body: Any, url: str | None = None) -> ParsedBody:
    if not isinstance(body, dict):
        raise BodyError(f"body must be a JSON object, got {type(body).__name__}")
    is_chat = url == CHAT_URL or (url is None and "messages" in body)
    if url not in (None, COMPLETIONS_URL, CHAT_URL):
        raise BodyError(f"url={url!r} is not served: use {COMPLETIONS_URL} or {CHAT_URL}")
    unknown = set(body) - set(_SAMPLING_KEYS) - _IGNORED_KEYS - {"prompt", "messages"}
    if unknown:
        raise BodyError(f"body has unknown field(s) {sorted(unknown)}: remove them")
    if body.get("n", 1) != 1:
        raise BodyError(f"body.n={body['n']!r}: only n=1 is served")
    if body.get("stream", False):
        raise BodyError("body.stream=true is not served here: use the streaming client API")
    out = ParsedBody(is_chat=is_chat)
    if is_chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BodyError("body.messages must be a non-empty list of {role, content}")
        for i, m in enumerate(msgs):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str)):
                raise BodyError(f"body.messages[{i}] must be an object with a string 'role'")
            if not isinstance(m.get("content"), str):
                raise BodyError(f"body.messages[{i}].content must be a string")
        out.messages = [{"role": m["role"], "content": m["content"]} for m in msgs]
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            out.prompt = prompt
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
        ):
            out.prompt = list(prompt)
        else:
            raise BodyError(
                f"body.prompt={prompt!r:.60} must be a non-empty string or list of token ids"
            )
    kwargs: dict[str, Any] = {}
    for key, name in _SAMPLING_KEYS.items():
        if key in body and body[key] is not None:
            value = body[key]
            if key == "stop" and isinstance(value, str):
                value = (value,)
            if key in ("stop", "stop_token_ids") and isinstance(value, list):
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            kwargs[name] = value
    lp = kwargs.get("logprobs")
    if lp is not None:
        # Completions send an int (top-k); only the chosen token's log-prob is returned.
        if isinstance(lp, bool) or (isinstance(lp, int) and 0 <= lp <= 20):
            kwargs["logprobs"] = bool(lp)
        else:
            raise BodyError(f"body.logprobs={lp!r}: use true/false or an int in 0..20")
    try:
        out.params = SamplingParams(**kwargs)
    except (ValueError, TypeError) as e:
        raise BodyError(str(e)) from None
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BodyError(f"body.priority={priority!r}: use an int (higher runs first)")
    out.priority = priority
    return out


def response_body(result: GenerationResult, *, is_chat: bool, model: str) -> dict[str, Any]:
    usage = {
        "prompt_tokens": result.num_prompt_tokens,
        "completion_tokens": result.num_generated_tokens,
        "total_tokens": result.num_prompt_tokens + result.num_generated_tokens,
        "prompt_tokens_details": {"cached_tokens": result.num_cached_tokens},
    }
    logprobs = None if result.logprobs is None else {"token_logprobs": result.logprobs}
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": result.finish_reason,
        "logprobs": logprobs,
    }
    if is_chat:
        choice["message"] = {"role": "assistant", "content": result.text}
    else:
        choice["text"] = result.text
    return {
        "id": result.request_id or f"cmpl-{uuid.uuid4().hex}",
        "object": "chat.completion" if is_chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
        # Speculative-decoding counts, per request (not an OpenAI field).
        "specfleet": {
            "num_draft_tokens": result.num_draft_tokens,
            "num_accepted_tokens": result.num_accepted_tokens,
            "token_ids": result.tokens,
        },
    }
