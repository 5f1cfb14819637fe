"""OpenAI wire format: `/v1/completions` and `/v1/chat/completions` bodies in, response bodies
and SSE chunks out. Pure data (no network); token text comes from the scheduler's tokenizer.

Served as OpenAI documents it, with these choices:
- `n` > 1 and `top_logprobs` / completions `logprobs` > 0 are a 400 (the engine returns only
  the chosen token's log-prob; n samples are n requests, each with its own `seed`);
- `temperature` defaults to 1 and completions' `max_tokens` to 16, as in OpenAI's API; chat's
  `max_tokens` defaults to the rest of the context;
- `user` is accepted and not used; specfleet's own knobs (`draft_depth`, `acceptance`, `top_k`,
  `min_p`, `repetition_penalty`, `ignore_eos`, `priority`) are extra body fields;
- each response carries a `specfleet` object with the speculation figures (acceptance).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from cluster.http import common as c
from cluster.http.errors import ApiError, bad, openai_error
from cluster.requests import Delta, GenerateInput, Usage

TokenText = Callable[[int], str]
_COMMON_KEYS = {
    "model", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "logprobs", "user",
    "stream", "stream_options", "presence_penalty", "frequency_penalty", "logit_bias",
    "priority", *c.EXTRA_SAMPLING,
}  # fmt: skip
CHAT_KEYS = _COMMON_KEYS | {
    "messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
    "tool_choice", "functions", "function_call", "parallel_tool_calls", "store", "metadata",
    "service_tier",
}  # fmt: skip
COMPLETION_KEYS = _COMMON_KEYS | {"prompt", "echo", "best_of", "suffix"}
ROLES = {"system", "user", "assistant", "developer"}
FINISH = {"stop": "stop", "length": "length"}


def _common(body: dict[str, Any], max_tokens: int | None, names: dict[str, str]) -> c.ApiRequest:
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(
            400,
            f"n={n!r} is not supported: only n=1 is served; send n requests, each with its own seed",
            "n",
            "unsupported",
        )
    c.unsupported(body, "frequency_penalty", lambda v: v == 0, "use presence_penalty")
    c.unsupported(body, "logit_bias", lambda v: not v, "omit it")
    kw: dict[str, Any] = {"temperature": body.get("temperature", 1.0)}
    if kw["temperature"] is None:
        kw["temperature"] = 1.0
    for key in ("top_p", "seed", "presence_penalty"):
        if body.get(key) is not None:
            kw[key] = body[key]
    kw["stop"] = c.stops(body.get("stop"), "stop")
    if max_tokens is not None:
        kw["max_tokens"] = max_tokens
    kw.update(c.extras(body))
    stream = c.flag(body, "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not stream:
            raise bad("stream_options", opts, "only set it with stream=true")
        if not isinstance(opts, dict) or set(opts) - {"include_usage"}:
            raise bad("stream_options", opts, "use {'include_usage': true|false}")
        include_usage = c.flag(opts, "include_usage")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad("user", user, "pass a string")
    return c.ApiRequest(
        inp=GenerateInput(params=c.sampling(kw, names), priority=c.priority_of(body)),
        model=c.model_of(body),
        stream=stream,
        include_usage=include_usage,
        names=names,
    )


def _max_tokens(body: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        v = body.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(key, v, "use an int >= 1")
            return v
    return default


def _logprobs(want: bool, top: Any, key: str) -> bool:
    if top not in (None, 0):
        raise ApiError(
            400,
            f"{key}={top!r} is not supported: only the chosen token's log-prob is served; "
            f"use {key}=0 or omit it",
            key,
            "unsupported",
        )
    return want


def parse_chat(body: Any, default_max_tokens: int) -> c.ApiRequest:
    body = c.check_object(body)
    c.check_keys(body, CHAT_KEYS)
    for key in ("tools", "functions"):
        c.unsupported(body, key, lambda v: not v, "tool calling is not served; omit it")
    c.unsupported(body, "tool_choice", lambda v: v == "none", "omit it")
    c.unsupported(body, "function_call", lambda v: v == "none", "omit it")
    c.unsupported(body, "response_format", lambda v: v == {"type": "text"}, "only {'type': 'text'}")
    mt = _max_tokens(body, ("max_completion_tokens", "max_tokens"), default_max_tokens)
    req = _common(body, mt, {})
    req.logprobs = _logprobs(c.flag(body, "logprobs"), body.get("top_logprobs"), "top_logprobs")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", msgs, "pass a non-empty list of {role, content}")
    if len(msgs) > c.MAX_MESSAGES:
        raise bad("messages", f"{len(msgs)} items", f"send at most {c.MAX_MESSAGES} messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise bad(f"messages[{i}].role", m.get("role") if isinstance(m, dict) else m, (
                f"use one of {sorted(ROLES)} (tool messages are not served)"
            ))  # fmt: skip
        role = "system" if m["role"] == "developer" else m["role"]
        content = c.text_of(
            m.get("content"), f"messages[{i}].content", allow_none=role == "assistant"
        )
        out.append({"role": role, "content": content})
    req.inp = _with(req, messages=out)
    return req


def parse_completion(body: Any) -> c.ApiRequest:
    body = c.check_object(body)
    c.check_keys(body, COMPLETION_KEYS)
    c.unsupported(body, "echo", lambda v: v is False, "omit it")
    c.unsupported(body, "best_of", lambda v: v == 1, "omit it")
    c.unsupported(body, "suffix", lambda v: v == "", "omit it")
    req = _common(body, _max_tokens(body, ("max_tokens",), 16), {})
    lp = body.get("logprobs")
    req.logprobs = _logprobs(lp is not None, lp, "logprobs")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        req.inp = _with(req, prompt=prompt)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        req.inp = _with(req, prompt=list(prompt))
    elif isinstance(prompt, list) and len(prompt) > 1 and not isinstance(prompt[0], int):
        raise bad("prompt", f"a list of {len(prompt)} prompts", "send one prompt per request")
    else:
        raise bad("prompt", prompt, "pass a non-empty string or list of token ids")
    return req


def _with(req: c.ApiRequest, **kw: Any) -> GenerateInput:
    params = req.inp.params
    if req.logprobs:
        params = dataclasses.replace(params, logprobs=True)
    return GenerateInput(params=params, priority=req.inp.priority, **kw)


def usage_body(u: Usage | None) -> dict[str, Any]:
    u = u or Usage()
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


class OpenAIStream:
    """SSE chunks of one streamed chat or legacy completion (`c.StreamCodec`)."""

    def __init__(self, req: c.ApiRequest, rid: str, chat: bool, token_text: TokenText) -> None:
        self.req, self.chat, self.token_text = req, chat, token_text
        self.id = f"chatcmpl-{rid}" if chat else f"cmpl-{rid}"
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"

    def _chunk(self, choice: dict[str, Any] | None, usage: Usage | None = None) -> str:
        body: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.req.model,
            "choices": [] if choice is None else [{"index": 0, **choice}],
        }
        if self.req.include_usage:
            body["usage"] = None if usage is None else usage_body(usage)
        if usage is not None:
            body["specfleet"] = c.spec_figures(usage)
        return c.sse(body)

    def _choice(self, d: Delta, reason: str | None) -> dict[str, Any]:
        lp = logprobs_body(d.tokens, d.logprobs, self.chat, self.token_text)
        if self.chat:
            delta = {"content": d.text} if d.text or reason is None else {}
            return {"delta": delta, "logprobs": lp, "finish_reason": reason}
        return {"text": d.text, "logprobs": lp, "finish_reason": reason}

    def start(self) -> list[str]:
        if not self.chat:
            return []
        return [self._chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None})]  # fmt: skip

    def delta(self, d: Delta) -> list[str]:
        return [self._chunk(self._choice(d, None))] if d.tokens or d.text else []

    def finish(self, d: Delta) -> list[str]:
        out = [self._chunk(self._choice(d, FINISH.get(d.finish_reason or "", "stop")))]
        if self.req.include_usage:
            out.append(self._chunk(None, d.usage))
        return [*out, c.sse("[DONE]")]

    def error(self, err: ApiError) -> list[str]:
        return [c.sse(openai_error(err))]  # the openai SDK raises APIError on this line


def logprobs_body(
    tokens: list[int], lps: list[float] | None, chat: bool, token_text: TokenText
) -> dict[str, Any] | None:
    if lps is None:
        return None
    texts = [token_text(t) for t in tokens]
    if chat:
        content = [
            {"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": []}
            for s, lp in zip(texts, lps)
        ]
        return {"content": content, "refusal": None}
    offsets, pos = [], 0
    for s in texts:
        offsets.append(pos)
        pos += len(s)
    return {"tokens": texts, "token_logprobs": lps, "top_logprobs": None, "text_offset": offsets}


def response_body(
    req: c.ApiRequest,
    rid: str,
    chat: bool,
    final: Delta,
    text: str,
    tokens: list[int],
    lps: list[float] | None,
    token_text: TokenText,
) -> dict[str, Any]:
    reason = FINISH.get(final.finish_reason or "", "stop")
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": reason,
        "logprobs": logprobs_body(tokens, lps, chat, token_text),
    }
    if chat:
        choice["message"] = {"role": "assistant", "content": text, "refusal": None}
    else:
        choice["text"] = text
    return {
        "id": f"chatcmpl-{rid}" if chat else f"cmpl-{rid}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [choice],
        "usage": usage_body(final.usage),
        "specfleet": {**c.spec_figures(final.usage), "token_ids": tokens},
    }


def models_body(names: list[str]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "specfleet"} for n in names
        ],
    }
