"""The HTTP server on the scheduler's loop with fake-engine workers behind it (fast, in
process): TLS with the gateway's certificate, 429 on a full queue, 503 with no worker."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from cluster.http import HttpConfig, HttpServer
from cluster.http.app import served_models
from cluster.tokenizer import TextTokenizer
from protos.grpc_auth import TLSFiles
from tests.cluster import test_tls
from tests.cluster.fake_engine import fake_logprobs, reference
from tests.cluster.test_scheduler import Harness
from tests.cluster.tiny_tokenizer import write_tiny_tokenizer

pytestmark = pytest.mark.timeout(120)
pki = test_tls.pki  # the module-scoped test CA fixture
TOKEN = "http-token"


class Served:
    """Harness (scheduler + fake-engine workers) and the HTTP server on one background loop."""

    def __init__(self, tmp: Path, config: HttpConfig, **harness: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.h = Harness(**harness)
        self.h.sched.tokenizer = TextTokenizer(write_tiny_tokenizer(tmp / "tok"))

        async def up() -> HttpServer:
            await self.h.__aenter__()
            return await HttpServer(
                self.h.sched, config, served_models(self.h.sched, "fake")
            ).start()

        self.http = self.call(up())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def client(self, **kw: Any) -> openai.OpenAI:
        scheme = "https" if self.http.config.tls else "http"
        url = f"{scheme}://127.0.0.1:{self.http.port}/v1"
        return openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0, timeout=30, **kw)

    def close(self) -> None:
        self.call(self.http.stop())
        self.call(self.h.__aexit__())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_tls_serves_https_with_the_gateways_certificate(tmp_path: Path, pki: Path) -> None:
    tls = TLSFiles(str(pki / "server.pem"), str(pki / "server.key"))
    s = Served(tmp_path, HttpConfig(auth_token=TOKEN, tls=tls), n=1)
    try:
        trusted = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        c = s.client(http_client=openai.DefaultHttpxClient(verify=trusted))
        out = c.completions.create(model="fake", prompt=[5, 6, 7], max_tokens=6, temperature=0)
        assert out.model_extra is not None
        assert out.model_extra["specfleet"]["token_ids"] == reference([5, 6, 7], 6)
        with pytest.raises(openai.APIConnectionError):  # an untrusted certificate
            s.client().models.list()
        plain = openai.OpenAI(
            base_url=f"http://127.0.0.1:{s.http.port}/v1", api_key=TOKEN, max_retries=0
        )
        with pytest.raises(openai.APIConnectionError):  # plaintext to the TLS port
            plain.models.list()
    finally:
        s.close()


def test_chat_logprobs_plain_and_streamed(tmp_path: Path) -> None:
    s = Served(tmp_path, HttpConfig(auth_token=TOKEN), n=1)
    try:
        c = s.client()
        kw: dict[str, Any] = {"model": "fake", "messages": [{"role": "user", "content": "yo"}],
                              "max_tokens": 7, "temperature": 0, "logprobs": True}  # fmt: skip
        want = reference(list(b"<|user|>\nyo\n<|assistant|>\n"), 7)
        plain = c.chat.completions.create(**kw)
        lp = plain.choices[0].logprobs
        assert lp is not None and lp.content is not None
        assert [t.logprob for t in lp.content] == pytest.approx(fake_logprobs(want))
        # Each token's own text (a lone byte of a multi-byte character decodes to U+FFFD).
        assert [t.token for t in lp.content] == [bytes([b]).decode(errors="replace") for b in want]
        streamed = [
            t.logprob
            for ch in c.chat.completions.create(**kw, stream=True)
            if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content
            for t in ch.choices[0].logprobs.content
        ]
        assert streamed == pytest.approx(fake_logprobs(want))
    finally:
        s.close()


def test_queue_full_is_429_and_no_worker_is_503(tmp_path: Path) -> None:
    s = Served(tmp_path, HttpConfig(auth_token=TOKEN), n=1, max_queue=1, step_delay_s=0.02)
    try:
        c = s.client()
        streams = []
        for i in range(8):  # the fake engine's 8 batch slots, each running once it streams
            st = c.completions.create(
                model="fake", prompt=[i + 1], max_tokens=1500, temperature=0, stream=True
            )
            next(iter(st))
            streams.append(st)
        streams.append(  # admitted into the queue of one
            c.completions.create(model="fake", prompt=[9], max_tokens=5, stream=True)
        )
        with pytest.raises(openai.RateLimitError) as full:
            c.completions.create(model="fake", prompt=[10], max_tokens=5)
        assert full.value.status_code == 429 and "queue" in full.value.message
        for st in streams:
            st.close()
        s.call(s.h.links[0].stop())
        url = f"http://127.0.0.1:{s.http.port}/health"
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(url, timeout=10)
        assert (
            health.value.code == 503 and json.loads(health.value.read())["workers_connected"] == 0
        )
        with pytest.raises(openai.InternalServerError, match="no worker") as down:
            c.completions.create(model="fake", prompt=[1], max_tokens=2)
        assert down.value.status_code == 503
    finally:
        s.close()


def test_config_errors_name_the_field() -> None:
    for kw, name in [({"port": 70000}, "port"), ({"auth_token": ""}, "auth_token"),
                     ({"max_body_bytes": 0}, "max_body_bytes")]:  # fmt: skip
        with pytest.raises(ValueError, match=f"HttpConfig.{name}"):
            HttpConfig(**kw)
