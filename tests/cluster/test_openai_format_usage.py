"""The offline job's output lines carry OpenAI's usage.prompt_tokens_details.cached_tokens: the
prompt tokens a worker's prefix cache served, from the gateway's Usage to the JSON line."""

from __future__ import annotations

from cluster.batch_inflight import _generation
from cluster.client import CompletionResult
from cluster.openai_format import response_body
from contract.requests import Usage


def test_cached_tokens_reach_the_batch_output_line() -> None:
    usage = Usage(prompt_tokens=40, completion_tokens=3, cached_tokens=32)
    result = _generation(CompletionResult("r1", "abc", [1, 2, 3], "length", usage))
    assert result.num_cached_tokens == 32
    body = response_body(result, is_chat=True, model="m")
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    assert body["usage"]["prompt_tokens"] == 40 and body["usage"]["total_tokens"] == 43
