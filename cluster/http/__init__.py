"""OpenAI- and Anthropic-compatible HTTP beside the gRPC gateway (`specfleet up --http-port`).

    GET  /health                 200 while a worker is connected and the scheduler has not
                                 failed, else 503 (no token needed)
    GET  /v1/models              the served model names
    POST /v1/completions         OpenAI legacy completions (SSE with stream=true)
    POST /v1/chat/completions    OpenAI chat completions (SSE, stream_options.include_usage)
    POST /v1/messages            Anthropic Messages (its SSE event sequence)

Modules: `app` (routes, auth, limits, request ids), `openai_codec` and `anthropic_codec` (one
per wire format, both directions, pure data), `common` (what both codecs share), `streaming`
(following a request, cancelling it when the client leaves), `errors` (statuses and both error
shapes), `server` (uvicorn on the scheduler's loop).

Why Starlette + uvicorn: both are widely used, actively maintained and typed (FastAPI is built
on them; vLLM and SGLang serve their OpenAI APIs on this stack), they speak ASGI so a handler is
a coroutine on the scheduler's own asyncio loop (no threads between HTTP and the scheduler),
Starlette's streaming responses and request-body streaming give SSE and a body-size limit
without hand-written HTTP, and uvicorn's h11 backend is pure Python with TLS through the
standard `ssl` module. FastAPI's pydantic models would duplicate the codecs' checks, whose
errors name the field, the value and the fix.

Imported only by the scheduler process (cluster/runtime.py): never by the client.
"""

from __future__ import annotations

from cluster.http.server import HttpConfig, HttpServer

__all__ = ["HttpConfig", "HttpServer"]
