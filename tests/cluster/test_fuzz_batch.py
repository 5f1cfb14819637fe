"""A bounded fuzz of the batch JSONL surface (issue 13): thousands of malformed lines (random
bytes, JSON of any shape, deep nesting, lone surrogates, out-of-range numbers, bad fields)
interleaved with good lines, run through the real client and gateway. The job never crashes,
never answers 500 (the batch's INTERNAL), serves every good line its reference tokens, puts
every custom_id in the output once, and a re-run finishes the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import Client
from cluster.batch_inflight import fleet_backend
from cluster.batch_job import BatchJobConfig, run_batch
from tests.cluster.fake_engine import reference
from tests.cluster.test_gateway import Running

pytestmark = pytest.mark.timeout(600)
MIN_LINES = 2000

leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)
)
anything = st.recursive(
    leaf, lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=6), k, max_size=3),
    max_leaves=8,
)  # fmt: skip
body_value = st.one_of(
    leaf, st.lists(st.integers(-3, 300), max_size=4), st.sampled_from([2**32, 2**40, "x" * 1100])
)
body = st.dictionaries(
    st.sampled_from(
        ["prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
         "stop_token_ids", "logprobs", "priority", "acceptance", "n", "stream", "bogus"]
    ),
    st.one_of(body_value, anything),
    max_size=4,
).map(lambda b: {**b, "max_tokens": b["max_tokens"] if b.get("max_tokens", 0) != 0 else 3})  # fmt: skip
request_line = st.builds(
    lambda cid, url, b: json.dumps({"custom_id": cid, "url": url, "body": b}),
    st.one_of(st.text(min_size=1, max_size=10), anything, st.just("a\ud800")),
    st.sampled_from([None, "/v1/completions", "/v1/chat/completions", "/v1/embeddings"]),
    body,
)
bad_line = st.one_of(
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    anything.map(json.dumps),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.just("[" * 200_000 + "]" * 200_000),
    request_line,
)


def test_fuzz_batch_jsonl_thousands_of_malformed_lines(tmp_path: Path) -> None:
    r = Running(tmp_path, n=2)
    figures = {"lines": 0, "malformed_lines": 0, "runs": 0, "ok": 0, "rejected_400": 0}
    figures |= {"good_lines": 0, "good_failures": 0}
    run = {"n": 0}

    @settings(max_examples=16, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.lists(bad_line, min_size=150, max_size=220))
    def fuzz(bad: list[str]) -> None:
        run["n"] += 1
        d = tmp_path / f"run{run['n']}"
        d.mkdir()
        lines, goods = [], {}
        for i, line in enumerate(bad):
            lines.append(line.replace("\n", " "))
            if i % 25 == 0:
                cid = f"good-{run['n']}-{i}"
                goods[cid] = f"p{cid}"
                lines.append(
                    json.dumps({"custom_id": cid, "body": {"prompt": f"p{cid}", "max_tokens": 4}})
                )
        inp, out = d / "in.jsonl", d / "out.jsonl"
        inp.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        with Client(r.gw.address, retry_timeout_s=5) as c:
            for _ in range(2):  # the run, then a re-run over the finished job
                summary = run_batch(
                    BatchJobConfig(inp, out, progress=False, concurrency=8), fleet_backend(c, 8, 1)
                )
        figures["runs"] += 1
        figures["lines"] += len(bad)
        figures["malformed_lines"] += summary.num_malformed
        rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
        ids = [row["custom_id"] for row in rows]
        assert len(ids) == len(set(ids)) == summary.num_requests
        for row in rows:
            status = row["response"]["status_code"]
            assert status in (200, 400), row  # 500 is the batch's INTERNAL
            figures["ok" if status == 200 else "rejected_400"] += 1
        by_id = {row["custom_id"]: row for row in rows}
        for cid, prompt in goods.items():
            figures["good_lines"] += 1
            got = by_id[cid]["response"]
            if got["status_code"] != 200 or got["body"]["specfleet"]["token_ids"] != reference(
                list(prompt.encode()), 4
            ):
                figures["good_failures"] += 1

    try:
        fuzz()
    finally:
        r.close()
    print(f"\nbatch fuzz figures: {figures}")
    assert figures["lines"] >= MIN_LINES
    assert figures["good_lines"] > 50 and figures["good_failures"] == 0
    assert figures["malformed_lines"] > 500 and figures["rejected_400"] > 100
