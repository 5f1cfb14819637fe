"""Anthropic Messages wire format: `POST /v1/messages` bodies in, message bodies and the SSE
event sequence out (message_start, content_block_start, ping, content_block_delta...,
content_block_stop, message_delta, message_stop). Pure data, no network.

Text content only (tool use, images and extended thinking are a 400). `temperature` defaults
to 1 as in Anthropic's API; `max_tokens` is required. The engine drops the stop sequence or EOS
that ended a reply without saying which one it was, so a stopped reply is `end_turn` when the
request has no `stop_sequences` and `stop_sequence` (with `stop_sequence: null`) when it has.
"""

from __future__ import annotations

from typing import Any

from cluster.http import common as c
from cluster.http.errors import ApiError, anthropic_error, bad
from cluster.requests import Delta, GenerateInput, Usage

KEYS = {
    "model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "metadata", "tools", "tool_choice", "thinking", "service_tier",
    "priority", *c.EXTRA_SAMPLING,
}  # fmt: skip
ROLES = ("user", "assistant")


def parse_messages(body: Any) -> c.ApiRequest:
    body = c.check_object(body)
    c.check_keys(body, KEYS)
    c.unsupported(body, "tools", lambda v: not v, "tool use is not served; omit it")
    c.unsupported(body, "tool_choice", lambda v: not v, "omit it")
    c.unsupported(
        body, "thinking", lambda v: isinstance(v, dict) and v.get("type") == "disabled", "omit it"
    )
    mt = body.get("max_tokens")
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        raise bad("max_tokens", mt, "pass an int >= 1 (required)")
    kw: dict[str, Any] = {"max_tokens": mt, **c.extras(body)}
    kw["temperature"] = 1.0 if body.get("temperature") is None else body["temperature"]
    if body.get("top_p") is not None:
        kw["top_p"] = body["top_p"]
    kw["stop"] = c.stops(body.get("stop_sequences"), "stop_sequences")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", msgs, "pass a non-empty list of {role, content}")
    if len(msgs) > c.MAX_MESSAGES:
        raise bad("messages", f"{len(msgs)} items", f"send at most {c.MAX_MESSAGES} messages")
    out = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": c.text_of(body["system"], "system")})
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else m
        if role not in ROLES:
            raise bad(f"messages[{i}].role", role, f"use one of {list(ROLES)}")
        out.append({"role": role, "content": c.text_of(m.get("content"), f"messages[{i}].content")})
    params = c.sampling(kw, {"stop": "stop_sequences"})
    return c.ApiRequest(
        inp=GenerateInput(messages=out, params=params, priority=c.priority_of(body)),
        model=c.model_of(body),
        stream=c.flag(body, "stream"),
    )


def stop_reason(req: c.ApiRequest, finish_reason: str | None) -> str:
    if finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if req.inp.params.stop else "end_turn"


def usage_body(u: Usage | None, prompt_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_tokens if u else prompt_tokens,
        "output_tokens": u.completion_tokens if u else 0,
    }


def message_body(req: c.ApiRequest, rid: str, final: Delta, text: str) -> dict[str, Any]:
    return {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason(req, final.finish_reason),
        "stop_sequence": None,
        "usage": usage_body(final.usage, 0),
        "specfleet": c.spec_figures(final.usage),
    }


class AnthropicStream:
    """Anthropic's streaming event sequence for one text reply (`c.StreamCodec`)."""

    def __init__(self, req: c.ApiRequest, rid: str, prompt_tokens: int) -> None:
        self.req, self.rid, self.prompt_tokens = req, rid, prompt_tokens

    def start(self) -> list[str]:
        message: dict[str, Any] = {
            "id": f"msg_{self.rid}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.req.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
        }
        block = {"type": "text", "text": ""}
        return [
            c.sse({"type": "message_start", "message": message}, "message_start"),
            c.sse({"type": "content_block_start", "index": 0, "content_block": block},
                  "content_block_start"),
            c.sse({"type": "ping"}, "ping"),
        ]  # fmt: skip

    def _text(self, text: str) -> list[str]:
        if not text:
            return []
        delta = {"type": "text_delta", "text": text}
        return [
            c.sse({"type": "content_block_delta", "index": 0, "delta": delta},
                  "content_block_delta")
        ]  # fmt: skip

    def delta(self, d: Delta) -> list[str]:
        return self._text(d.text)

    def finish(self, d: Delta) -> list[str]:
        delta = {"stop_reason": stop_reason(self.req, d.finish_reason), "stop_sequence": None}
        usage = usage_body(d.usage, self.prompt_tokens)
        return [
            *self._text(d.text),
            c.sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            c.sse({"type": "message_delta", "delta": delta, "usage": usage,
                   "specfleet": c.spec_figures(d.usage)}, "message_delta"),
            c.sse({"type": "message_stop"}, "message_stop"),
        ]  # fmt: skip

    def error(self, err: ApiError) -> list[str]:
        return [c.sse(anthropic_error(err), "error")]
