"""The OpenAI- and Anthropic-compatible HTTP API of a real `specfleet up` fleet, driven by the
official `openai` and `anthropic` SDKs (and urllib where an SDK would refuse the input).

Greedy text through HTTP must equal the gRPC gateway's and the in-process engine's."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest

from cluster import Client
from cluster.tokenizer import TextTokenizer
from tests.integration.http_fleet import TOKEN, UpFleet
from workers.types import SamplingParams

pytestmark = pytest.mark.timeout(400)
MODEL = "target"  # the tiny checkpoint's directory name: the workers' model id
CHAT = [
    {"role": "system", "content": "you are terse"},
    {"role": "user", "content": "the quick brown fox"},
    {"role": "assistant", "content": "jumps"},
    {"role": "user", "content": "over the lazy dog"},
]


def oai(fleet: UpFleet, key: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=fleet.base_url, api_key=key, max_retries=0, timeout=120)


def extra(resp: Any) -> dict[str, Any]:
    return dict(resp.model_extra["specfleet"])


@pytest.fixture(scope="module")
def engine(up_fleet: UpFleet) -> Any:
    from workers import Engine

    return Engine.load(str(up_fleet.target), drafter=f"model:{up_fleet.draft}", draft_depth=3)


def test_models_health_and_greedy_parity(up_fleet: UpFleet, engine: Any) -> None:
    client = oai(up_fleet)
    assert MODEL in [m.id for m in client.models.list().data]
    status, health = up_fleet.raw("/health")
    assert status == 200 and health["workers_connected"] == 1
    # Legacy completion == gRPC gateway == in-process engine, token for token.
    prompt = "def add(a, b):"
    comp = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    want = engine.generate([prompt], SamplingParams(max_tokens=12))[0]
    with Client(up_fleet.gateway, token=TOKEN) as grpc_client:
        via_grpc = grpc_client.generate(prompt, max_tokens=12)
        chat_grpc = grpc_client.generate(CHAT, max_tokens=10)
    assert extra(comp)["token_ids"] == via_grpc.tokens == want.tokens
    assert comp.choices[0].text == via_grpc.text
    assert comp.usage.completion_tokens == 12 and comp.choices[0].finish_reason == "length"
    # Chat (system + multi-turn) through the same chat template and tokenizer.
    chat = client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_completion_tokens=10,
        temperature=0,  # type: ignore[arg-type]
    )
    tok = TextTokenizer(up_fleet.target)
    ids = tok.encode(tok.apply_chat_template(CHAT))
    assert chat.usage is not None and chat.usage.prompt_tokens == len(ids)
    assert extra(chat)["token_ids"] == chat_grpc.tokens
    assert chat_grpc.tokens == engine.generate([ids], SamplingParams(max_tokens=10))[0].tokens
    assert chat.choices[0].message.content == chat_grpc.text
    assert extra(chat)["num_draft_tokens"] >= extra(chat)["num_accepted_tokens"] >= 0


def test_streamed_chat_and_completion_equal_plain(up_fleet: UpFleet) -> None:
    client = oai(up_fleet)
    kw: dict[str, Any] = {"model": MODEL, "messages": CHAT, "max_tokens": 14, "temperature": 0}
    plain = client.chat.completions.create(**kw)
    chunks = list(
        client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content and text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 14
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens  # type: ignore[union-attr]
    # Legacy completions stream too, with the chosen tokens' log-probs.
    body: dict[str, Any] = {"model": MODEL, "prompt": "the lazy", "max_tokens": 9, "temperature": 0}
    one = client.completions.create(**body, logprobs=0)
    parts = list(client.completions.create(**body, stream=True))
    assert "".join(p.choices[0].text for p in parts) == one.choices[0].text
    lp = one.choices[0].logprobs
    assert lp is not None and lp.token_logprobs is not None and len(lp.token_logprobs) == 9
    assert all(v <= 0 for v in lp.token_logprobs)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 7}, "top_p"),
        ({"n": 2}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"logprobs": True, "top_logprobs": 3}, "top_logprobs"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"extra_body": {"draft_depth": 99}}, "draft_depth"),
        ({"extra_body": {"bogus": 1}}, "bogus"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_bad_chat_inputs_are_400_naming_the_field(
    up_fleet: UpFleet, kw: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"model": MODEL, "messages": CHAT, "max_tokens": 4, **kw}
    with pytest.raises(openai.BadRequestError) as err:
        oai(up_fleet).chat.completions.create(**args)
    assert err.value.status_code == 400 and field in err.value.message
    assert isinstance(err.value.body, dict) and err.value.body["param"] == field


def test_other_http_errors(up_fleet: UpFleet) -> None:
    client = oai(up_fleet)
    with pytest.raises(openai.NotFoundError, match="nope"):
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=2)
    with pytest.raises(openai.AuthenticationError) as auth:
        oai(up_fleet, key="wrong").models.list()
    assert auth.value.status_code == 401
    with pytest.raises(openai.BadRequestError, match="context") as long:
        client.completions.create(model=MODEL, prompt=[5] * 5000, max_tokens=2)
    assert (
        isinstance(long.value.body, dict) and long.value.body["code"] == "context_length_exceeded"
    )
    status, body = up_fleet.raw("/v1/completions", b"{not json")
    assert status == 400 and "JSON" in body["error"]["message"]
    big = json.dumps({"model": MODEL, "prompt": "x" * (17 << 20)}).encode()
    status, body = up_fleet.raw("/v1/completions", big)
    assert status == 413 and "limit" in body["error"]["message"]
    status, body = up_fleet.raw(
        "/v1/completions", b'{"model": "target", "prompt": "a"}', {"x-request-id": "a b"}
    )
    assert status == 400 and body["error"]["param"] == "X-Request-Id"
    # Still serving after all that.
    assert client.completions.create(model=MODEL, prompt="ok", max_tokens=2).usage is not None


def test_request_id_attaches_instead_of_running_twice(up_fleet: UpFleet) -> None:
    client = oai(up_fleet)
    runs_before = up_fleet.worker_counter("specfleet_request_success_total")
    # Sampled without a seed: a second run would (almost surely) give other text. EOS ignored:
    # a first sampled EOS made both answers empty, equal whether attached or run twice (CI).
    kw: dict[str, Any] = {"model": MODEL, "prompt": "fox", "max_tokens": 24, "temperature": 1.0,
                          "extra_body": {"ignore_eos": True}}  # fmt: skip
    headers = {"X-Request-Id": f"retry-{time.time_ns()}"}
    raw = client.completions.with_raw_response.create(**kw, extra_headers=headers)
    assert raw.headers["x-request-id"] == headers["X-Request-Id"]
    a = raw.parse()
    assert int(raw.headers["x-specfleet-accepted-tokens"]) == extra(a)["num_accepted_tokens"]
    b = client.completions.create(**kw, extra_headers=headers)
    assert a.id == b.id == f"cmpl-{headers['X-Request-Id']}"
    assert extra(a)["token_ids"] == extra(b)["token_ids"] and len(extra(a)["token_ids"]) == 24
    assert up_fleet.worker_counter("specfleet_request_success_total") == runs_before + 1


def test_client_disconnect_mid_stream_frees_the_row(up_fleet: UpFleet) -> None:
    client = oai(up_fleet)
    running = "specfleet_num_requests_running"
    aborted_before = up_fleet.worker_counter(
        "specfleet_request_success_total", finished_reason="abort"
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=3500,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 3:
            break
    assert up_fleet.worker_counter(running) == 1
    stream.close()
    end = time.monotonic() + 20
    while up_fleet.worker_counter(running) and time.monotonic() < end:
        time.sleep(0.05)
    assert up_fleet.worker_counter(running) == 0
    aborted = up_fleet.worker_counter("specfleet_request_success_total", finished_reason="abort")
    assert aborted == aborted_before + 1
    with Client(up_fleet.gateway, token=TOKEN) as c:
        info = c.cluster_info()
    assert info.live_requests == 0 and all(w.inflight == 0 for w in info.workers)


def test_retry_after_a_dropped_stream_attaches(up_fleet: UpFleet) -> None:
    """With X-Request-Id, a dropped client's request runs on for a grace period, and the retry
    gets the whole answer from the same single run."""
    client = oai(up_fleet)
    counter = "specfleet_request_success_total"
    runs_before = up_fleet.worker_counter(counter)
    aborted_before = up_fleet.worker_counter(counter, finished_reason="abort")
    headers = {"X-Request-Id": f"drop-{time.time_ns()}"}
    kw: dict[str, Any] = {"model": MODEL, "messages": CHAT, "max_tokens": 200, "temperature": 0,
                          "extra_body": {"ignore_eos": True}}  # fmt: skip
    first = []
    stream = client.chat.completions.create(**kw, stream=True, extra_headers=headers)
    for chunk in stream:
        first.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
        if len(first) == 4:
            break
    stream.close()
    again = client.chat.completions.create(**kw, extra_headers=headers)
    plain = client.chat.completions.create(**kw)
    text = again.choices[0].message.content
    assert text == plain.choices[0].message.content and text.startswith("".join(first))
    assert up_fleet.worker_counter(counter) == runs_before + 2  # the retried one ran once
    assert up_fleet.worker_counter(counter, finished_reason="abort") == aborted_before


def test_anthropic_messages_plain_and_streamed(up_fleet: UpFleet) -> None:
    client = anthropic.Anthropic(base_url=up_fleet.http, api_key=TOKEN, max_retries=0, timeout=120)
    system, turns = CHAT[0]["content"], CHAT[1:]
    # Newer SDKs dropped the sampling arguments from create(): they travel as body fields.
    kw: dict[str, Any] = {
        "model": MODEL,
        "system": system,
        "messages": turns,
        "max_tokens": 12,
        "extra_body": {"temperature": 0, "top_k": 0},
    }
    msg = client.messages.create(**kw)
    oa_chat = oai(up_fleet).chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    assert msg.content[0].type == "text"
    assert msg.content[0].text == oa_chat.choices[0].message.content
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 12
    assert msg.usage.input_tokens == oa_chat.usage.prompt_tokens  # type: ignore[union-attr]
    events = list(client.messages.create(**kw, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[2:-3]) == {"content_block_delta"}
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")  # type: ignore[union-attr]
    assert text == msg.content[0].text
    with client.messages.stream(**kw) as s:
        assert "".join(s.text_stream) == msg.content[0].text
        final = s.get_final_message()
    assert final.usage.output_tokens == 12 and final.stop_reason == "max_tokens"
    # Errors in Anthropic's shape: a wrong key, a bad field.
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=up_fleet.http, api_key="wrong", max_retries=0).messages.create(
            **kw
        )
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=MODEL, messages=turns, max_tokens=0)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-nope", messages=turns, max_tokens=2)
