"""The scheduler honours priorities and deadlines when capacity is scarce (a recording link
stands in for the worker: the test is about dispatch order, not transport)."""

from __future__ import annotations

import asyncio

from cluster.policy import PolicyConfig
from cluster.requests import GenerateInput
from cluster.scheduler import Scheduler, SchedulerConfig
from cluster.worker_codec import WorkerStatus, WorkerSubmit
from workers.types import EngineInfo, RequestOutput, SamplingParams


class RecordingLink:
    worker_id = "w"

    def __init__(self) -> None:
        self.sent: list[WorkerSubmit] = []
        self.aborted: list[str] = []

    def send(self, submit: list[WorkerSubmit], abort: list[str]) -> None:
        self.sent += submit
        self.aborted += abort


def status(slots: int) -> WorkerStatus:
    info = EngineInfo("m", 256, 4096, "none", 1, slots, 0, 0, slots, 100_000, 0)
    return WorkerStatus("w", "serving", info)


def test_priority_and_deadline_order_under_one_slot() -> None:
    async def main() -> None:
        s = Scheduler(SchedulerConfig(PolicyConfig(coalesce_window_s=0.0)))
        link = RecordingLink()
        s.add_worker(link)
        s.start()
        s.worker_connected("w", status(1))
        p = SamplingParams(max_tokens=2)
        first = s.submit(GenerateInput(prompt=[1], params=p, request_id="first"))
        await asyncio.sleep(0.01)
        assert [x.request_id for x in link.sent] == ["first~1.1"]  # attempt 1, dispatch 1
        s.submit(GenerateInput(prompt=[2], params=p, request_id="low"))
        s.submit(GenerateInput(prompt=[3], params=p, request_id="late", timeout_s=60))
        s.submit(GenerateInput(prompt=[4], params=p, request_id="soon", timeout_s=5))
        s.submit(GenerateInput(prompt=[5], params=p, request_id="high", priority=9))
        expired = s.submit(GenerateInput(prompt=[6], params=p, request_id="x", timeout_s=0.02))
        order = []
        await asyncio.sleep(0.03)  # "x" expires while the only slot is busy
        for _ in range(5):
            wire = link.sent[-1].request_id
            order.append(wire.split("~")[0])
            s.worker_events("w", [RequestOutput(wire, [7, 8], True, "length")])
            await asyncio.sleep(0.01)
        assert order.pop(0) == "first"
        assert order == ["high", "soon", "late", "low"]
        assert first.final is not None and first.tokens == [7, 8]
        assert expired.final is not None and expired.final.error_code == "DEADLINE_EXCEEDED"
        # The resumed attempt after a fault carries the committed prefix and the rest of the
        # budget: prompt + delivered tokens, max_tokens reduced.
        r = s.submit(
            GenerateInput(prompt=[9, 9], params=SamplingParams(max_tokens=5), request_id="r")
        )
        await asyncio.sleep(0.01)
        w1 = link.sent[-1].request_id
        assert w1.startswith("r~1.")
        s.worker_events("w", [RequestOutput(w1, [1, 2], False)])
        s.worker_disconnected("w", "test")
        s.worker_connected("w", status(1))
        await asyncio.sleep(0.01)
        resumed = link.sent[-1]
        w2 = resumed.request_id
        assert w2.startswith("r~2.") and resumed.prompt == [9, 9, 1, 2]
        assert resumed.params.max_tokens == 3
        s.worker_events("w", [RequestOutput(w1, [66], False)])  # stale attempt: ignored
        s.worker_events("w", [RequestOutput(w2, [3, 4, 5], True, "length")])
        assert r.tokens == [1, 2, 3, 4, 5] and r.final.usage.requeues == 1
        await s.stop()

    asyncio.run(main())
