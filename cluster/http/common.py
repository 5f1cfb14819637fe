"""What the OpenAI and Anthropic codecs share: the parsed request, field checks that name the
field, message-content flattening, sampling parameters, and the SSE line format."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from cluster.http.errors import ApiError, bad
from cluster.requests import Delta, GenerateInput, Usage
from contract.types import SamplingParams

MAX_STOPS = 16
MAX_MESSAGES = 4096
# specfleet's own sampling knobs, accepted as extra body fields by both surfaces
# (the openai SDK sends them with `extra_body={...}`).
EXTRA_SAMPLING = ("draft_depth", "acceptance", "top_k", "min_p", "repetition_penalty", "ignore_eos")
_FIELD = re.compile(r"^SamplingParams\.(\w+)=")


@dataclass
class ApiRequest:
    """One HTTP generation request, parsed: what the scheduler runs plus how to answer."""

    inp: GenerateInput  # request_id is filled in by the app (X-Request-Id or a fresh one)
    model: str
    stream: bool = False
    include_usage: bool = False  # OpenAI stream_options.include_usage
    logprobs: bool = False
    # Body field names as the caller spelled them, for errors raised by SamplingParams.
    names: dict[str, str] | None = None


class StreamCodec(Protocol):
    """Turns a request's deltas into SSE text (one codec per wire format and endpoint)."""

    def start(self) -> list[str]: ...
    def delta(self, d: Delta) -> list[str]: ...
    def finish(self, d: Delta) -> list[str]: ...
    def error(self, err: ApiError) -> list[str]: ...


def sse(data: dict[str, Any] | str, event: str | None = None) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def check_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, f"body must be a JSON object, got {type(body).__name__}", None)
    return body


def check_keys(body: dict[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            f"unknown field(s) {unknown}: remove them (specfleet extras: {list(EXTRA_SAMPLING)})",
            unknown[0],
            "unknown_parameter",
        )


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", model, "pass the model id that GET /v1/models lists")
    return model


def flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(key, value, "use true or false")
    return value


def unsupported(body: dict[str, Any], key: str, neutral: Callable[[Any], bool], fix: str) -> None:
    """Refuse a feature specfleet does not serve unless the value asks for nothing."""
    if key in body and body[key] is not None and not neutral(body[key]):
        raise ApiError(400, f"{key}={body[key]!r:.80} is not supported: {fix}", key, "unsupported")


def stops(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise bad(key, value, "use a non-empty string or a list of non-empty strings")
    if len(items) > MAX_STOPS:
        raise bad(key, f"{len(items)} items", f"use at most {MAX_STOPS} stop sequences")
    return tuple(items)


def text_of(content: Any, where: str, allow_none: bool = False) -> str:
    """A message's content as text: a string, or a list of {"type": "text", "text": ...} parts."""
    if content is None and allow_none:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not (isinstance(part, dict) and isinstance(part.get("text"), str)):
                raise bad(f"{where}[{i}]", part, "pass a {'type': 'text', 'text': ...} part")
            if part.get("type") != "text":
                raise ApiError(
                    400,
                    f"{where}[{i}].type={part.get('type')!r} is not supported: only text parts",
                    f"{where}[{i}].type",
                    "unsupported",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, content, "pass a string or a list of text parts")


def sampling(kwargs: dict[str, Any], names: dict[str, str]) -> SamplingParams:
    """SamplingParams from body values; its errors become 400s naming the body field."""
    try:
        return SamplingParams(**kwargs)
    except (ValueError, TypeError) as e:
        m = _FIELD.match(str(e))
        field = names.get(m.group(1), m.group(1)) if m else None
        raise ApiError(400, str(e), field, "invalid_value") from None


def extras(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in EXTRA_SAMPLING if body.get(k) is not None}


def priority_of(body: dict[str, Any]) -> int:
    p = body.get("priority", 0)
    if isinstance(p, bool) or not isinstance(p, int):
        raise bad("priority", p, "use an int (higher runs first)")
    return p


def spec_figures(usage: Usage | None) -> dict[str, Any]:
    """specfleet's per-request speculation figures (not an OpenAI/Anthropic field)."""
    u = usage or Usage()
    rate = u.accepted_tokens / u.draft_tokens if u.draft_tokens else 0.0
    return {
        "num_draft_tokens": u.draft_tokens,
        "num_accepted_tokens": u.accepted_tokens,
        "acceptance_rate": round(rate, 4),
        "requeues": u.requeues,
        "queue_time_s": round(u.queue_time_s, 6),
    }
