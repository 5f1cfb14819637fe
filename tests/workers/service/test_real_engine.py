"""Issue tests 1, 2 and 5 against the REAL engine (tiny random llama + perturbed draft model)
served on a real loopback gRPC server, with metrics scraped over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protos import worker_codec as codec
from tests.tiny import mixed_prompts
from tests.workers.service.real_engine import make_engine
from workers.service.grpc_client import WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import RoundStats, SamplingParams

ROOT = Path(__file__).resolve().parents[3]
DYING_CLIENT = """
import sys, time
from protos import worker_codec as codec
from workers.service.grpc_client import WorkerClient
from workers.types import SamplingParams
s = WorkerClient(sys.argv[1]).session()
s.send([codec.SubmitRequest(str(i), [7, i], SamplingParams(max_tokens=3000)) for i in range(3)])
next(s.events())
print("streaming", flush=True)
time.sleep(600)
"""


class SpyEngine:
    """The real engine, with every RoundStats it hands out recorded for comparison."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.rounds: list[RoundStats] = []

    def take_round_stats(self) -> list[RoundStats]:
        stats = self._engine.take_round_stats()
        self.rounds += stats
        return stats

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


def _serve(engine, **cfg) -> tuple[WorkerServer, WorkerClient]:
    server = WorkerServer(lambda: engine, WorkerServerConfig(drain_grace_s=2, **cfg))
    server.start(wait_ready=True, timeout=60)
    return server, WorkerClient(server.address)


def test_streams_match_engine_generate_with_concurrent_sessions() -> None:
    prompts = mixed_prompts(8, seed=3) + mixed_prompts(6, seed=4, lengths=[3, 40, 7, 1, 20, 11])
    max_tokens = [10 + (i * 7) % 17 for i in range(len(prompts))]
    params = [SamplingParams(max_tokens=m) for m in max_tokens]
    reference = make_engine().generate(prompts, params)
    assert len({tuple(c.tokens) for c in reference}) > 1

    server, client = _serve(make_engine(max_batch_size=6))
    try:
        got: dict[int, list[int]] = {}
        finishes: dict[int, str] = {}

        def session(indices: list[int]) -> None:
            # First half at once, second half after tokens flow, so requests join a running batch.
            s = client.session(timeout=120)
            half = len(indices) // 2
            s.send([codec.SubmitRequest(str(i), prompts[i], params[i]) for i in indices[:half]])
            sent_rest = False
            left = set(indices)
            for ev in s.events():
                assert not isinstance(ev, codec.RequestError), ev
                i = int(ev.request_id)
                got.setdefault(i, []).extend(ev.new_tokens)
                if ev.finished:
                    finishes[i] = ev.finish_reason
                    left.discard(i)
                if not sent_rest:
                    s.send(
                        [codec.SubmitRequest(str(i), prompts[i], params[i]) for i in indices[half:]]
                    )
                    s.close()
                    sent_rest = True
                if not left:
                    break

        groups = [list(range(k, len(prompts), 3)) for k in range(3)]
        threads = [threading.Thread(target=session, args=(g,)) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(got) == list(range(len(prompts)))
        for i, ref in enumerate(reference):
            assert got[i] == ref.tokens, (
                f"prompt {i}: served {got[i]} != Engine.generate {ref.tokens}"
            )
            assert finishes[i] == ref.finish_reason
    finally:
        client.close()
        server.stop(grace=1)


def _scrape(address: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_over_http_equal_engine_counts() -> None:
    spy = SpyEngine(make_engine(max_batch_size=4))
    server, client = _serve(spy, model_name="tiny-llama", worker_id="w0")
    try:
        prompts = mixed_prompts(8, seed=5)
        results = client.generate(
            {f"m{i}": p for i, p in enumerate(prompts)}, SamplingParams(max_tokens=20)
        )
        m = _scrape(server.metrics_address)
    finally:
        client.close()
        server.stop(grace=1)
    lab = (("model", "tiny-llama"), ("worker", "w0"))

    def metric(name: str, **extra: str) -> float:
        return m[("specfleet_" + name, tuple(sorted((*lab, *extra.items()))))]

    rounds = spy.rounds
    finishes = [r.finish for r in results.values()]
    received = sum(len(r.tokens) for r in results.values())
    drafted = sum(s.num_draft_tokens for s in rounds)
    accepted = sum(s.num_accepted_tokens for s in rounds)
    assert 0 < accepted < drafted, "workload must both accept and reject drafts"
    assert metric("spec_decode_num_drafts_total") == sum(s.num_drafts for s in rounds)
    assert (
        metric("spec_decode_num_draft_tokens_total")
        == drafted
        == sum(f.num_draft_tokens for f in finishes)
    )
    assert (
        metric("spec_decode_num_accepted_tokens_total")
        == accepted
        == sum(f.num_accepted_tokens for f in finishes)
    )
    depth = max(len(s.accepted_per_pos) for s in rounds)
    for pos in range(depth):
        want = sum(s.accepted_per_pos[pos] for s in rounds if pos < len(s.accepted_per_pos))
        assert metric("spec_decode_num_accepted_tokens_per_pos_total", position=str(pos)) == want
    assert sum(v for (n, _), v in m.items() if n.endswith("_per_pos_total")) == accepted
    assert (
        metric("generation_tokens_total") == received == sum(s.num_generated_tokens for s in rounds)
    )
    assert received == sum(f.num_generated_tokens for f in finishes) == 20 * len(prompts)
    assert (
        metric("prompt_tokens_total")
        == sum(s.num_prefill_tokens for s in rounds)
        == sum(map(len, prompts))
    )
    assert metric("request_success_total", finished_reason="length") == len(prompts)
    assert metric("time_to_first_token_seconds_count") == len(prompts)
    assert metric("e2e_request_latency_seconds_count") == len(prompts)
    decode_rounds = [s for s in rounds if s.batch_size > 0]
    assert metric("batch_size_count") == len(decode_rounds)
    assert metric("batch_size_sum") == sum(s.batch_size for s in decode_rounds)
    by_depth = {dict(labels)["draft_depth"]: v for (n, labels), v in m.items()
                if n == "specfleet_decode_rounds_total"}  # fmt: skip
    assert sum(by_depth.values()) == len(decode_rounds)
    drafting = sum(v for d, v in by_depth.items() if d != "0")
    assert drafting == sum(s.num_draft_tokens > 0 for s in decode_rounds) > 0
    assert max(map(int, by_depth)) == max(len(s.accepted_per_pos) for s in decode_rounds)
    assert metric("round_duration_seconds_count", phase="verify") == len(decode_rounds)
    assert metric("round_duration_seconds_sum", phase="verify") == pytest.approx(
        sum(s.time_verify_s for s in decode_rounds)
    )
    assert metric("num_requests_running") == 0 and metric("num_requests_waiting") == 0
    assert not any("request_id" in dict(labels) for _, labels in m)


def test_prefix_cache_hits_reach_the_wire_and_metrics() -> None:
    """Shared-prefix prompts through a real worker: num_cached_tokens on the finish events, and
    specfleet_prefix_cache_{queries,hits}_total equal to the engine's counts."""
    spy = SpyEngine(make_engine(max_batch_size=4, prefix_cache_tokens=1024))
    server, client = _serve(spy, model_name="tiny-llama", worker_id="w0")
    shared = mixed_prompts(1, seed=8, lengths=[40])[0]  # 5 blocks of 8
    prompts = {"first": shared + [1, 2], "second": shared + [3, 4, 5], "third": shared[:20]}
    try:
        got = {}
        for rid, p in prompts.items():  # one at a time, so each later one finds the cache warm
            got |= client.generate({rid: p}, SamplingParams(max_tokens=5))
        m = _scrape(server.metrics_address)
    finally:
        client.close()
        server.stop(grace=1)
    cached = {rid: r.finish.num_cached_tokens for rid, r in got.items()}
    assert cached == {"first": 0, "second": 40, "third": 16}
    lab = (("model", "tiny-llama"), ("worker", "w0"))

    def metric(name: str, **extra: str) -> float:
        return m[("specfleet_" + name, tuple(sorted((*lab, *extra.items()))))]

    assert metric("prefix_cache_queries_total") == sum(map(len, prompts.values()))
    assert (
        metric("prefix_cache_hits_total") == 56 == sum(s.num_prefix_hit_tokens for s in spy.rounds)
    )
    assert metric("prefix_cache_capacity_tokens", state="on") == 1024
    assert metric("prefix_cache_usage_tokens") == 40  # the shared 5 blocks, stored once
    assert metric("prefix_cache_evicted_tokens_total") == 0


def _wait_rows_free(client: WorkerClient, max_batch_size: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.info().engine
        if info.num_running == 0 and info.num_waiting == 0 and info.free_slots == max_batch_size:
            return
        time.sleep(0.02)
    raise AssertionError(f"rows not freed: {client.info().engine}")


def test_cancel_and_deadline_free_engine_rows() -> None:
    server, client = _serve(make_engine(max_batch_size=4))
    try:
        long = SamplingParams(max_tokens=4000)
        s = client.session()
        s.send(
            [codec.SubmitRequest(f"c{i}", p, long) for i, p in enumerate(mixed_prompts(6, seed=1))]
        )
        next(s.events())
        busy = client.info().engine
        assert busy.num_running == 4 and busy.num_waiting == 2 and busy.free_slots == 0
        s.cancel()
        _wait_rows_free(client, 4)

        s = client.session(timeout=0.5)
        s.send(
            [codec.SubmitRequest(f"d{i}", p, long) for i, p in enumerate(mixed_prompts(3, seed=2))]
        )
        with pytest.raises(grpc.RpcError) as err:
            for _ in s.events():
                pass
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        _wait_rows_free(client, 4)
        m = _scrape(server.metrics_address)
        aborted = sum(
            v
            for (n, lab), v in m.items()
            if n == "specfleet_request_success_total" and ("finished_reason", "abort") in lab
        )
        assert aborted == 9
        # A client process that dies mid-stream (no cancel sent; the socket just closes).
        child = subprocess.Popen(
            [sys.executable, "-c", DYING_CLIENT, server.address], cwd=ROOT, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        try:
            assert child.stdout.readline().strip() == "streaming"
            assert client.info().engine.num_running == 3
            child.kill()
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        _wait_rows_free(client, 4)
        # The worker still serves after all three.
        res = client.generate({"after": [1, 2, 3]}, SamplingParams(max_tokens=5))
        assert len(res["after"].tokens) == 5
    finally:
        client.close()
        server.stop(grace=1)
