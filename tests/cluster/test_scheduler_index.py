"""The scheduler's incremental state: the fleet index always equals the capacity recomputed from
each worker's in-flight set, deadlines of running requests fire from a timer heap, a full queue
is refused before any tokenizing, and a dispatch pass that keeps raising fails fast (issue 13,
defect 11) instead of retrying every 10 ms forever."""

from __future__ import annotations

import asyncio
import random

import pytest

from cluster.policy import PolicyConfig
from cluster.requests import GenerateInput, SchedulerError
from cluster.scheduler import Scheduler, SchedulerConfig
from cluster.worker_codec import WorkerStatus, WorkerSubmit
from contract.types import EngineInfo, RequestOutput, SamplingParams

P = SamplingParams(max_tokens=4)


class Link:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.sent: list[WorkerSubmit] = []
        self.aborted: list[str] = []

    def send(self, submit: list[WorkerSubmit], abort: list[str]) -> None:
        self.sent += submit
        self.aborted += abort


def status(wid: str, slots: int, kv: int = 100_000) -> WorkerStatus:
    return WorkerStatus(
        wid, "serving", EngineInfo("m", 256, 4096, "none", 1, slots, 0, 0, slots, kv, 0)
    )


def sched(**policy: object) -> Scheduler:
    cfg = PolicyConfig(coalesce_window_s=0.0, **policy)  # type: ignore[arg-type]
    return Scheduler(SchedulerConfig(cfg))


def assert_index_matches(s: Scheduler) -> None:
    for wid, slot in s.workers.items():
        cap = slot.capacity()
        if cap is None:
            assert wid not in s.fleet
        else:
            assert s.fleet.capacity(wid) == cap
    caps = [c for slot in s.workers.values() if (c := slot.capacity()) is not None]
    assert s.fleet.total_free_slots == sum(max(c.free_slots, 0) for c in caps)


def test_fleet_index_follows_dispatch_finish_requeue_and_reconnect() -> None:
    async def main() -> None:
        rng = random.Random(7)
        s = sched()
        links = {f"w{i}": Link(f"w{i}") for i in range(4)}
        for link in links.values():
            s.add_worker(link)
        s.start()
        for i, wid in enumerate(links):
            s.worker_connected(wid, status(wid, 2 + i, kv=300))
        answered: set[str] = set()
        for step in range(300):
            action = rng.random()
            if action < 0.5:
                n = rng.randint(1, 60)
                s.submit(GenerateInput(prompt=[1] * n, params=P, request_id=f"r{step}"))
            elif action < 0.85:  # a worker finishes one of its requests
                wid = rng.choice(list(links))
                mine = [w for w in s.workers[wid].inflight if w not in answered]
                if mine:
                    wire = rng.choice(mine)
                    answered.add(wire)
                    s.worker_events(wid, [RequestOutput(wire, [5, 6, 7, 8], True, "length")])
            elif action < 0.95:
                s.cancel(f"r{rng.randrange(step + 1)}")
            else:  # a worker's session breaks and comes back
                wid = rng.choice(list(links))
                s.worker_disconnected(wid, "test")
                assert_index_matches(s)
                s.worker_connected(wid, status(wid, 2 + int(wid[1:]), kv=300))
            await asyncio.sleep(0)
            assert_index_matches(s)
        assert any(link.sent for link in links.values())
        await s.stop()

    asyncio.run(main())


def test_running_request_deadline_fires_and_aborts_on_worker() -> None:
    async def main() -> None:
        s = sched()
        link = Link("w")
        s.add_worker(link)
        s.start()
        s.worker_connected("w", status("w", 4))
        st = s.submit(GenerateInput(prompt=[1, 2], params=P, request_id="slow", timeout_s=0.05))
        await asyncio.sleep(0.01)
        assert [x.request_id for x in link.sent] == ["slow~1.1"] and not st.finished
        await asyncio.sleep(0.1)  # the worker never answers
        assert st.final is not None and st.final.error_code == "DEADLINE_EXCEEDED"
        assert link.aborted == ["slow~1.1"]
        assert s.fleet.capacity("w").free_slots == 4
        await s.stop()

    asyncio.run(main())


class CountingTokenizer:
    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [1, 2, 3]

    def detokenizer(self) -> None:
        return None


def test_full_queue_refused_before_tokenizing() -> None:
    s = sched(max_queue=2)
    tok = CountingTokenizer()
    s.tokenizer = tok  # type: ignore[assignment]
    for i in range(2):
        s.submit(GenerateInput(prompt="hi", params=P, request_id=f"r{i}"))
    assert tok.calls == 2
    with pytest.raises(SchedulerError) as e:
        s.submit(GenerateInput(prompt="hi", params=P, request_id="r2"))
    assert e.value.code == "RESOURCE_EXHAUSTED" and "max_queue" not in e.value.message
    assert "2 requests" in e.value.message and tok.calls == 2
    # A retry of an accepted request still attaches, full queue or not.
    assert s.submit(GenerateInput(prompt="hi", params=P, request_id="r1")).request_id == "r1"


def test_dispatch_pass_that_keeps_raising_fails_fast() -> None:
    async def main() -> None:
        fatal: list[str] = []
        s = Scheduler(
            SchedulerConfig(PolicyConfig(coalesce_window_s=0.0), max_tick_failures=3),
            on_fatal=fatal.append,
        )
        s.add_worker(Link("w"))
        s.worker_connected("w", status("w", 4))
        calls = 0

        def broken(*a: object) -> list:
            nonlocal calls
            calls += 1
            raise RuntimeError("bug in batch formation")

        s.policy.form_batches = broken  # type: ignore[method-assign]
        st = s.submit(GenerateInput(prompt=[1], params=P, request_id="a"))
        s.start()
        await asyncio.sleep(0.2)
        assert calls == 3  # then it stopped retrying
        assert s.metrics.tick_failures._value.get() == 3
        assert fatal and "bug in batch formation" in fatal[0]
        assert st.final is not None and st.final.error_code == "UNAVAILABLE"
        with pytest.raises(SchedulerError) as e:
            s.submit(GenerateInput(prompt=[1], params=P, request_id="b"))
        assert e.value.code == "UNAVAILABLE"
        await s.stop()

    asyncio.run(main())


def test_timer_heaps_stay_bounded_by_what_is_live() -> None:
    """Finished requests with far deadlines leave no lasting trace in the timer heaps."""

    async def main() -> None:
        s = sched()
        link = Link("w")
        s.add_worker(link)
        s.start()
        s.worker_connected("w", status("w", 8))
        for i in range(2000):
            # Later requests have earlier deadlines: finished ones never reach a heap's top.
            timeout = 3600.0 - i
            s.submit(GenerateInput(prompt=[1, 2], params=P, request_id=f"r{i}", timeout_s=timeout))
            if i % 8 == 7:
                await asyncio.sleep(0)
                done = [
                    RequestOutput(x.request_id, [1, 2, 3, 4], True, "length") for x in link.sent
                ]
                link.sent.clear()
                s.worker_events("w", done)  # type: ignore[arg-type]
        assert len(s.finished) == 2000 - len(s.live)
        assert len(s._running_deadlines) <= 2 * len(s._wire) + 64
        assert len(s.policy._deadlines) <= 2 * len(s.policy) + 64
        assert len(s.policy._timers) <= 6 * len(s.policy) + 64
        await s.stop()

    asyncio.run(main())
