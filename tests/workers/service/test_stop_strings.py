"""Issue 13 defect 5: stop strings are bounded by the shared contract, and the worker service
tokenizes them off the engine thread (one request's stops used to stall every session)."""

from __future__ import annotations

import threading

import pytest

from contract.limits import MAX_STOP_CHARS, MAX_STOP_SEQUENCES
from tests.workers.service.fake_engine import FakeEngine
from workers.service.grpc_client import WorkerClient
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import SamplingParams


def test_stop_strings_are_bounded() -> None:
    with pytest.raises(ValueError, match=r"SamplingParams\.stop=.*over the limit of 1024"):
        SamplingParams(stop=["x" * 240_000])
    with pytest.raises(ValueError, match=r"SamplingParams\.stop=.*65 stop sequences"):
        SamplingParams(stop=["x"] * (MAX_STOP_SEQUENCES + 1))
    SamplingParams(stop=["x" * MAX_STOP_CHARS] * MAX_STOP_SEQUENCES)  # the most allowed


class Tokenizer:
    """Encodes one id per character and records which threads called it."""

    def __init__(self) -> None:
        self.threads: set[str] = set()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        self.threads.add(threading.current_thread().name)
        return [ord(c) % 256 for c in text]


class StopEngine(FakeEngine):
    """Records the stops each request reaches the engine with."""

    def __init__(self) -> None:
        super().__init__(max_batch_size=4)
        self.tokenizer = Tokenizer()
        self.stops: dict[str, tuple] = {}

    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams) -> None:
        self.stops[request_id.split("/", 1)[1]] = params.stop
        super().add_request(request_id, prompt, params)


def test_stop_strings_are_tokenized_off_the_engine_thread() -> None:
    engine = StopEngine()
    server = WorkerServer(lambda: engine, WorkerServerConfig(metrics_port=None)).start(
        wait_ready=True, timeout=30
    )
    client = WorkerClient(server.address)
    try:
        params = SamplingParams(max_tokens=3, stop=["ab", (7, 8), "c"])
        out = client.generate({"r": [1, 2]}, params)
        assert out["r"].error is None and out["r"].finish.finish_reason == "length"
        assert engine.stops["r"] == ((97, 98), (7, 8), (99,))
        assert engine.tokenizer.threads and "specfleet-engine" not in engine.tokenizer.threads
    finally:
        client.close()
        server.stop(grace=0.5)
