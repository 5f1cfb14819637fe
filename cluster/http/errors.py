"""HTTP errors of the OpenAI and Anthropic surfaces: one exception, two JSON shapes.

Scheduler error codes (gRPC status names, cluster/requests.py) map to HTTP statuses here only,
as gRPC statuses are mapped in cluster/gateway_server.py only.
"""

from __future__ import annotations

from typing import Any

from cluster import requests as rq

# Scheduler code -> HTTP status. CANCELLED only reaches a caller whose request someone else
# cancelled (the gRPC Cancel RPC); 499 is nginx's "client closed request", the usual choice.
STATUS_OF_CODE: dict[str, int] = {
    rq.INVALID_ARGUMENT: 400,
    rq.RESOURCE_EXHAUSTED: 429,
    rq.UNAVAILABLE: 503,
    rq.DEADLINE_EXCEEDED: 504,
    rq.CANCELLED: 499,
    rq.INTERNAL: 500,
}
# Phrases of admission errors that mean "the prompt does not fit" (cluster/admission.py).
_TOO_LONG = ("leaves no room in the context", "KV budget", "characters, over the", "tokens, over ")

_OPENAI_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "cancelled",
    503: "service_unavailable",
    504: "timeout",
}
_ANTHROPIC_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


class ApiError(Exception):
    """An HTTP error: `param` names the offending field (OpenAI's `error.param`)."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    @classmethod
    def from_scheduler(cls, code: str, message: str, param: str | None = None) -> ApiError:
        status = STATUS_OF_CODE.get(code, 500)
        sub = code.lower()
        if status == 400 and any(p in message for p in _TOO_LONG):
            sub = "context_length_exceeded"
        return cls(status, message, param, sub)


def bad(param: str, value: object, fix: str) -> ApiError:
    """A 400 that names the field, the value and the fix."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ApiError(400, f"{param}={shown} is invalid: {fix}", param, "invalid_value")


def openai_error(err: ApiError) -> dict[str, Any]:
    kind = _OPENAI_TYPE.get(err.status, "server_error")
    return {"error": {"message": err.message, "type": kind, "param": err.param, "code": err.code}}


def anthropic_error(err: ApiError) -> dict[str, Any]:
    kind = _ANTHROPIC_TYPE.get(err.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}
