"""What a caller submits and receives on any surface (gateway, Client, batch jobs): plain data
shared by the cluster and the wire codecs. Validated at creation, against the shared limits,
so every surface refuses the same requests with the same message."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from contract.limits import MAX_REQUEST_ID_CHARS
from contract.status import StatusCode
from contract.types import SamplingParams

MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1  # the gateway's int32 field


class SchedulerError(Exception):
    """A request refused or not finished; `code` is the status the surface answers with."""

    def __init__(self, code: StatusCode | str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class GenerateInput:
    """One request as callers submit it: exactly one of prompt / messages."""

    prompt: str | list[int] | None = None
    messages: list[dict[str, str]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str | None = None  # idempotency key; generated when None
    priority: int = 0  # higher runs first
    timeout_s: float | None = None  # relative deadline for the whole request

    def __post_init__(self) -> None:
        def bad(name: str, fix: str) -> ValueError:
            return ValueError(f"{name}={getattr(self, name)!r:.80} is invalid: {fix}")

        rid = self.request_id
        if rid is not None and (not isinstance(rid, str) or not rid):
            raise bad("request_id", "pass a non-empty string or None")
        if rid is not None and len(rid) > MAX_REQUEST_ID_CHARS:
            raise ValueError(
                f"request_id: {len(rid)} characters is over the limit of "
                f"{MAX_REQUEST_ID_CHARS}: use a shorter id"
            )
        if (
            isinstance(self.priority, bool)
            or not isinstance(self.priority, int)
            or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY
        ):
            raise bad("priority", "pass an int in -2**31..2**31-1")
        t = self.timeout_s
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf
        ):
            raise bad("timeout_s", "pass a finite number of seconds > 0, or None")


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    requeues: int = 0
    queue_time_s: float = 0.0
    cached_tokens: int = 0  # prompt tokens served from a worker's prefix cache (last attempt)


@dataclass
class Delta:
    """What a subscriber receives: new text and tokens; the last one has finished=True."""

    request_id: str
    text: str
    tokens: list[int]  # [num_new_tokens]
    finished: bool = False
    finish_reason: str | None = None
    error_code: StatusCode | str | None = None
    error: str | None = None
    usage: Usage | None = None
    logprobs: list[float] | None = None  # [num_new_tokens] when requested
