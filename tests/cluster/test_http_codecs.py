"""The OpenAI and Anthropic codecs alone: request bodies to scheduler inputs (errors naming the
field), and deltas to the SSE each wire format defines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster.http import anthropic_codec as an
from cluster.http import openai_codec as oa
from cluster.http.errors import ApiError
from cluster.requests import Delta, Usage

MSGS = [{"role": "user", "content": "hi"}]


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MSGS, **kw}


def test_openai_bodies_map_onto_sampling_params() -> None:
    req = oa.parse_chat(
        chat(
            max_completion_tokens=7,
            top_p=0.5,
            seed=3,
            stop="END",
            user="u1",
            stream=True,
            stream_options={"include_usage": True},
            draft_depth=2,
            acceptance="coupled",
            top_k=5,
            min_p=0.1,
            repetition_penalty=1.2,
            priority=4,
            messages=[
                {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None},
            ],
        ),
        default_max_tokens=99,
    )  # fmt: skip
    p = req.inp.params
    assert (p.max_tokens, p.top_p, p.seed, p.stop, p.temperature) == (7, 0.5, 3, ("END",), 1.0)
    assert (p.draft_depth, p.acceptance, p.top_k, p.min_p) == (2, "coupled", 5, 0.1)
    assert p.repetition_penalty == 1.2 and req.inp.priority == 4
    assert req.stream and req.include_usage and not req.logprobs
    assert req.inp.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
    ]
    assert oa.parse_chat(chat(), default_max_tokens=99).inp.params.max_tokens == 99
    comp = oa.parse_completion({"model": "m", "prompt": ["one"], "logprobs": 0, "temperature": 0})
    assert comp.inp.prompt == "one" and comp.inp.params.max_tokens == 16 and comp.logprobs
    assert comp.inp.params.logprobs and comp.inp.params.temperature == 0
    assert oa.parse_completion({"model": "m", "prompt": [[3, 4]]}).inp.prompt == [3, 4]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([1], None),
        (chat(model=""), "model"),
        (chat(temperature=-0.5), "temperature"),
        (chat(seed="x"), "seed"),
        (chat(max_tokens=True), "max_tokens"),
        (chat(stream_options={"include_usage": True}), "stream_options"),
        (chat(stream=True, stream_options={"x": 1}), "stream_options"),
        (chat(frequency_penalty=0.5), "frequency_penalty"),
        (chat(logit_bias={"1": 2}), "logit_bias"),
        (chat(tools=[{"type": "function"}]), "tools"),
        (chat(response_format={"type": "json_object"}), "response_format"),
        (chat(messages=[{"role": "user", "content": [{"type": "image_url", "text": ""}]}]),
         "messages[0].content[0].type"),
        (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (chat(stop=["a"] * 17), "stop"),
        (chat(acceptance="maybe"), "acceptance"),
        (chat(priority=1.5), "priority"),
        (chat(user=3), "user"),
        (chat(wat=1), "wat"),
    ],
)  # fmt: skip
def test_bad_openai_chat_bodies_name_the_field(body: Any, param: str | None) -> None:
    with pytest.raises(ApiError) as err:
        oa.parse_chat(body, default_max_tokens=8)
    assert err.value.status == 400 and err.value.param == param
    if param is not None:
        assert param in err.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": [1, -2]}, "prompt"),
        ({"model": "m", "prompt": "a", "logprobs": 2}, "logprobs"),
        ({"model": "m", "prompt": "a", "echo": True}, "echo"),
        ({"model": "m", "prompt": "a", "best_of": 3}, "best_of"),
        ({"model": "m", "prompt": "a", "messages": MSGS}, "messages"),
    ],
)
def test_bad_completion_bodies_name_the_field(body: Any, param: str) -> None:
    with pytest.raises(ApiError) as err:
        oa.parse_completion(body)
    assert err.value.status == 400 and err.value.param == param and param in err.value.message


def test_anthropic_bodies() -> None:
    req = an.parse_messages(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "sys"}],
            "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            "stop_sequences": ["\n\n"],
            "top_k": 3,
            "metadata": {"user_id": "x"},
        }
    )
    assert req.inp.messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    p = req.inp.params
    assert (p.max_tokens, p.top_k, p.stop, p.temperature) == (5, 3, ("\n\n",), 1.0)
    for body, param in [
        ({"model": "m", "messages": MSGS}, "max_tokens"),
        ({"model": "m", "max_tokens": 2, "messages": [{"role": "system", "content": "x"}]},
         "messages[0].role"),
        ({"model": "m", "max_tokens": 2, "messages": MSGS, "stop_sequences": [""]},
         "stop_sequences"),
        ({"model": "m", "max_tokens": 2, "messages": MSGS, "top_p": 0}, "top_p"),
        ({"model": "m", "max_tokens": 2, "messages": MSGS, "tools": [{"name": "f"}]}, "tools"),
    ]:  # fmt: skip
        with pytest.raises(ApiError) as err:
            an.parse_messages(body)
        assert err.value.param == param and param in err.value.message


def _events(lines: list[str]) -> list[tuple[str | None, Any]]:
    out = []
    for block in "".join(lines).strip().split("\n\n"):
        event, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        out.append((event, data))
    return out


def test_anthropic_event_sequence() -> None:
    req = an.parse_messages({"model": "m", "max_tokens": 3, "messages": MSGS})
    s = an.AnthropicStream(req, "r1", prompt_tokens=4)
    usage = Usage(prompt_tokens=4, completion_tokens=3, draft_tokens=4, accepted_tokens=2)
    lines = [*s.start(), *s.delta(Delta("r1", "ab", [1, 2]))]
    lines += s.finish(Delta("r1", "c", [3], True, "length", usage=usage))
    ev = _events(lines)
    assert [e for e, _ in ev] == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(data["type"] == name for name, data in ev)
    assert ev[0][1]["message"]["usage"] == {"input_tokens": 4, "output_tokens": 0}
    assert "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta") == "abc"
    assert ev[6][1]["delta"]["stop_reason"] == "max_tokens"
    assert ev[6][1]["usage"]["output_tokens"] == 3
    assert ev[6][1]["specfleet"]["acceptance_rate"] == 0.5
    err = _events(s.error(ApiError(429, "full")))
    assert err == [
        ("error", {"type": "error", "error": {"type": "rate_limit_error", "message": "full"}})
    ]


def test_openai_chunks_usage_and_done() -> None:
    req = oa.parse_chat(chat(stream=True, stream_options={"include_usage": True}), 8)
    s = oa.OpenAIStream(req, "r2", chat=True, token_text=lambda t: chr(96 + t))
    usage = Usage(prompt_tokens=2, completion_tokens=2, cached_tokens=1)
    ev = _events([*s.start(), *s.delta(Delta("r2", "a", [1])),
                  *s.finish(Delta("r2", "b", [2], True, "stop", usage=usage))])  # fmt: skip
    chunks = [d for _, d in ev]
    assert chunks[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:3]] == ["a", "b"]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["total_tokens"] == 4
    assert chunks[3]["usage"]["prompt_tokens_details"] == {"cached_tokens": 1}
    assert all(c["id"] == "chatcmpl-r2" for c in chunks[:-1])
    lp = oa.logprobs_body([1, 2], [-0.5, -1.0], False, lambda t: chr(96 + t))
    assert lp == {"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.0], "top_logprobs": None,
                  "text_offset": [0, 1]}  # fmt: skip
