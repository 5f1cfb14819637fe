"""The Starlette app: OpenAI and Anthropic routes over the gateway's scheduler.

Every route goes through the same `Scheduler.submit` / `RequestState.stream` as the gRPC gateway
(same tokenizer, same queue, same idempotency by request id). `X-Request-Id` becomes the
scheduler's request id, so a retried call with the same header attaches to the running (or
finished) request instead of running it twice; the response echoes it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cluster.follow import follow
from cluster.http import anthropic_codec as an
from cluster.http import openai_codec as oa
from cluster.http.common import ApiRequest, StreamCodec
from cluster.http.errors import ApiError, anthropic_error, openai_error
from cluster.http.streaming import SSEResponse, until_disconnect
from cluster.requests import Delta, RequestState, SchedulerError
from cluster.scheduler import Scheduler

log = logging.getLogger(__name__)
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
FALLBACK_CONTEXT = 4096  # chat's default max_tokens before any worker reported its context
DRAIN = 4  # a too-large body is read and dropped up to DRAIN x the limit before the 413


@dataclass(frozen=True)
class AppLimits:
    auth_token: str | None = None
    max_body_bytes: int = 16 * 1024 * 1024  # the gRPC gateway's receive limit
    retry_grace_s: float = 5.0  # a named request outlives its client this long (a retry attaches)


class HttpApi:
    def __init__(
        self, sched: Scheduler, limits: AppLimits, model_names: Callable[[], list[str]]
    ) -> None:
        self.sched, self.limits, self.model_names = sched, limits, model_names

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
        ]

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            err = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
            return self._error(request, err)

        async def internal_error(request: Request, exc: Exception) -> Response:
            log.exception("HTTP %s %s failed", request.method, request.url.path, exc_info=exc)
            return self._error(request, ApiError(500, f"internal error: {type(exc).__name__}"))

        handlers = {HTTPException: http_error, Exception: internal_error}
        return Starlette(routes=routes, exception_handlers=handlers)

    # -- plain routes ---------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        n = self._num_connected()
        if self.sched.failed is not None:  # failing fast: the process is about to restart
            body = {"status": f"scheduler failed: {self.sched.failed}", "workers_connected": n}
            return JSONResponse(body, 503)
        body = {"status": "ok" if n else "no workers", "workers_connected": n}
        return JSONResponse(body, 200 if n else 503)

    async def models(self, request: Request) -> Response:
        try:
            self._auth(request)
        except ApiError as e:
            return self._error(request, e)
        return JSONResponse(oa.models_body(self.model_names()))

    # -- generation routes ----------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        return await self._generate(
            request, lambda b: oa.parse_chat(b, self._context()), kind="chat"
        )

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, oa.parse_completion, kind="completion")

    async def messages(self, request: Request) -> Response:
        return await self._generate(request, an.parse_messages, kind="messages")

    async def _generate(
        self, request: Request, parse: Callable[[Any], ApiRequest], kind: str
    ) -> Response:
        try:
            self._auth(request)
            req = parse(await self._json(request))
            self._check_model(req.model)
            state = self._submit(req, self._request_id(request))
        except ApiError as e:
            return self._error(request, e)
        rid = state.request_id
        headers = {"x-request-id": rid}
        grace = self.limits.retry_grace_s if "x-request-id" in request.headers else 0.0
        if req.stream:
            codec: StreamCodec
            if kind == "messages":
                codec = an.AnthropicStream(req, rid, len(state.prompt))
            else:
                codec = oa.OpenAIStream(req, rid, kind == "chat", self._token_text)
            return SSEResponse(self._events(state, codec, grace), headers)
        work = asyncio.ensure_future(self._last(state, grace))
        if not await until_disconnect(work, request.receive):
            return Response(status_code=499)  # nobody reads it; the request was cancelled
        final = work.result()
        if final.error_code:
            err = ApiError.from_scheduler(final.error_code, final.error or final.error_code)
            return self._error(request, err, headers)
        usage = final.usage
        headers["x-specfleet-draft-tokens"] = str(usage.draft_tokens if usage else 0)
        headers["x-specfleet-accepted-tokens"] = str(usage.accepted_tokens if usage else 0)
        if kind == "messages":
            body = an.message_body(req, rid, final, state.text)
        else:
            tokens = list(state.tokens)
            body = oa.response_body(
                req, rid, kind == "chat", final, state.text, tokens, state.lp(), self._token_text
            )
        return JSONResponse(body, headers=headers)

    async def _last(self, state: RequestState, grace_s: float) -> Delta:
        last: Delta | None = None
        async with aclosing(follow(self.sched, state, grace_s)) as deltas:
            async for d in deltas:
                last = d
        assert last is not None and last.finished
        return last

    async def _events(
        self, state: RequestState, codec: StreamCodec, grace_s: float
    ) -> AsyncIterator[str]:
        for line in codec.start():
            yield line
        async with aclosing(follow(self.sched, state, grace_s)) as deltas:
            async for d in deltas:
                if d.error_code:
                    if d.text or d.tokens:
                        for line in codec.delta(Delta(d.request_id, d.text, d.tokens)):
                            yield line
                    err = ApiError.from_scheduler(d.error_code, d.error or d.error_code)
                    for line in codec.error(err):
                        yield line
                    return
                for line in codec.finish(d) if d.finished else codec.delta(d):
                    yield line

    # -- helpers ------------------------------------------------------------------------------
    def _error(
        self, request: Request, err: ApiError, headers: dict[str, str] | None = None
    ) -> Response:
        anthropic = request.url.path == "/v1/messages"
        body = anthropic_error(err) if anthropic else openai_error(err)
        if err.status == 401:
            headers = {**(headers or {}), "www-authenticate": "Bearer"}
        return JSONResponse(body, err.status, headers=headers)

    def _auth(self, request: Request) -> None:
        token = self.limits.auth_token
        if token is None:
            return
        given = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            raise ApiError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <token>' "
                "(or 'x-api-key: <token>') with the gateway's token",
                None,
                "invalid_api_key",
            )

    async def _json(self, request: Request) -> Any:
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > DRAIN * limit):
            raise ApiError(413, f"body of {declared} bytes is over the {limit}-byte limit")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size <= limit:
                    chunks.append(chunk)
                elif size > DRAIN * limit:
                    break
        except ClientDisconnect:
            raise ApiError(499, "the client left while sending the body") from None
        if size > limit:
            # Read (and dropped) the rest first, up to DRAIN x the limit: a client still sending
            # when the server answers gets a connection reset instead of this 413.
            raise ApiError(413, f"body of {size}+ bytes is over the {limit}-byte limit: send less")
        try:
            return json.loads(b"".join(chunks))
        except (ValueError, RecursionError) as e:
            raise ApiError(400, f"body is not valid JSON: {e}", None, "invalid_json") from None

    def _check_model(self, model: str) -> None:
        names = self.model_names()
        if names and model not in names:
            raise ApiError(
                404,
                f"model={model!r} is not served here: use one of {names} (GET /v1/models)",
                "model",
                "model_not_found",
            )

    def _request_id(self, request: Request) -> str:
        rid = request.headers.get("x-request-id")
        if rid is None:
            return f"http-{uuid.uuid4().hex}"
        if not REQUEST_ID.match(rid):
            raise ApiError(
                400,
                f"X-Request-Id={rid[:140]!r} is invalid: use 1-128 of A-Z a-z 0-9 . _ : -",
                "X-Request-Id",
                "invalid_value",
            )
        return rid

    def _submit(self, req: ApiRequest, rid: str) -> RequestState:
        if not self._num_connected():
            raise ApiError(
                503, "no worker is connected: start workers (specfleet up) and retry", None
            )
        try:
            return self.sched.submit(replace(req.inp, request_id=rid))
        except SchedulerError as e:
            raise ApiError.from_scheduler(e.code, e.message) from None

    def _num_connected(self) -> int:
        return sum(s.connected for s in self.sched.workers.values())

    def _context(self) -> int:
        known = [s.status.engine.max_context for s in self.sched.workers.values() if s.status]
        return max(known, default=FALLBACK_CONTEXT)

    def _token_text(self, token: int) -> str:
        tok = self.sched.tokenizer
        return tok.decode([token]) if tok is not None else str(token)


def served_models(sched: Scheduler, configured: str) -> Callable[[], list[str]]:
    """The names a request's `model` may use: the configured name and each worker's model id."""

    def names() -> list[str]:
        out = [configured] if configured else []
        for slot in sched.workers.values():
            if slot.status is not None and slot.status.engine.model_id not in out:
                out.append(slot.status.engine.model_id)
        return out

    return names
