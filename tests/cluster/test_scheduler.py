"""Scheduler + gRPC worker links against real worker servers on loopback (fake engines: the
model is not under test). Exactly-once delivery across stream breaks and worker loss."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from cluster.policy import PolicyConfig
from cluster.requests import Delta, GenerateInput, SchedulerError
from cluster.scheduler import Scheduler, SchedulerConfig
from cluster.worker_rpc import GrpcWorkerLink, LinkConfig
from tests.cluster.fake_engine import FakeEngine, reference
from workers.service.grpc_server import WorkerServer, WorkerServerConfig
from workers.types import SamplingParams

pytestmark = pytest.mark.timeout(90)


class Harness:
    def __init__(
        self,
        n: int = 2,
        max_queue: int = 4096,
        step_delay_s: float = 0.002,
        token=None,
        worker_tls=None,
        link: LinkConfig | None = None,
        make_engine: Callable[[], Any] | None = None,  # default: FakeEngine(step_delay_s)
    ):
        self.n, self.step_delay_s, self.token = n, step_delay_s, token
        self.make_engine = make_engine or (lambda: FakeEngine(step_delay_s=self.step_delay_s))
        self.worker_tls = worker_tls
        self.link = link or LinkConfig(auth_token=token, reconnect_s=0.05)
        self.engines: list[Any] = []
        self.servers: list[WorkerServer | None] = []
        self.sched = Scheduler(SchedulerConfig(PolicyConfig(max_queue=max_queue)))
        self.links: list[GrpcWorkerLink] = []

    def start_server(self, i: int) -> WorkerServer:
        eng = self.make_engine()
        cfg = WorkerServerConfig(
            metrics_port=None, worker_id=f"w{i}", auth_token=self.token, tls=self.worker_tls
        )
        server = WorkerServer(lambda: eng, cfg).start(wait_ready=True, timeout=10)
        if i < len(self.servers):
            self.servers[i], self.engines[i] = server, eng
        else:
            self.servers.append(server)
            self.engines.append(eng)
        return server

    async def __aenter__(self) -> Harness:
        for i in range(self.n):
            await asyncio.to_thread(self.start_server, i)
        self.sched.start()
        for i in range(self.n):
            link = GrpcWorkerLink(
                f"w{i}",
                self._resolver(i),
                self.sched,
                self.link,
            )
            self.sched.add_worker(link)
            link.start()
            self.links.append(link)
        for _ in range(400):
            if all(s.connected for s in self.sched.workers.values()):
                break
            await asyncio.sleep(0.01)
        return self

    def _resolver(self, i: int) -> Callable:
        async def resolve() -> str:
            server = self.servers[i]
            if server is None:
                raise ConnectionError(f"worker {i} is down")
            return server.address

        return resolve

    async def __aexit__(self, *exc: object) -> None:
        for link in self.links:
            await link.stop()
        await self.sched.stop()
        for s in self.servers:
            if s is not None:
                await asyncio.to_thread(s.stop, 0)


async def collect(state) -> tuple[list[int], Delta, int]:
    tokens, n = [], 0
    last = None
    async for d in state.stream():
        tokens += d.tokens
        n += 1
        last = d
    assert last is not None and last.finished
    return tokens, last, n


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(255) for _ in range(rng.choice([3, 9, 20, 70, 150]))] for _ in range(n)]


def test_many_requests_exactly_match_reference() -> None:
    async def main() -> None:
        async with Harness(n=2) as h:
            ps = prompts(120)
            states = [
                h.sched.submit(
                    GenerateInput(prompt=p, params=SamplingParams(max_tokens=5 + i % 11))
                )
                for i, p in enumerate(ps)
            ]
            results = await asyncio.gather(*(collect(s) for s in states))
            for i, (p, (toks, last, _)) in enumerate(zip(ps, results)):
                assert toks == reference(p, 5 + i % 11)
                assert last.finish_reason == "length" and last.error is None
                assert last.usage.completion_tokens == len(toks)
                assert last.usage.draft_tokens == 3 * len(toks)
            # Both workers served, batching happened, nothing left in flight.
            assert all(e.num_added > 10 for e in h.engines)
            assert h.sched.metrics.batch_size.sum == 120  # every request dispatched once
            assert not h.sched.live and all(not s.inflight for s in h.sched.workers.values())

    asyncio.run(main())


@pytest.mark.parametrize("fault", ["break_stream", "kill_server"])
def test_fault_requeues_from_committed_prefix_exactly_once(fault: str) -> None:
    async def main() -> None:
        async with Harness(n=2, step_delay_s=0.004) as h:
            ps = prompts(40, seed=1)
            states = [
                h.sched.submit(GenerateInput(prompt=p, params=SamplingParams(max_tokens=40)))
                for p in ps
            ]
            tasks = [asyncio.create_task(collect(s)) for s in states]
            # Wait until worker 0 holds requests with tokens already delivered.
            for _ in range(500):
                mid = [s for s in states if s.worker_id == "w0" and 0 < len(s.tokens) < 30]
                if len(mid) >= 3:
                    break
                await asyncio.sleep(0.005)
            assert mid, "worker 0 never held a request mid-generation"
            if fault == "break_stream":
                h.links[0].break_stream()
            else:
                server, h.servers[0] = h.servers[0], None
                await asyncio.to_thread(server.stop, 0)
            results = await asyncio.gather(*tasks)
            for p, (toks, last, _) in zip(ps, results):
                assert toks == reference(p, 40), "each token exactly once, same as without fault"
                assert last.usage.completion_tokens == 40
            assert h.sched.metrics.requeues._value.get() >= len(mid)
            assert any(r[1].usage.requeues >= 1 for r in results)
            if fault == "break_stream":  # the link reconnects to the same live worker
                for _ in range(200):
                    if h.sched.workers["w0"].connected:
                        break
                    await asyncio.sleep(0.01)
                assert h.sched.workers["w0"].connections == 2
            else:  # bring worker 0 back (a restart on a new port) and use it again
                await asyncio.to_thread(h.start_server, 0)
                for _ in range(300):
                    if h.sched.workers["w0"].connected:
                        break
                    await asyncio.sleep(0.01)
                assert h.sched.workers["w0"].connected
                s = h.sched.submit(
                    GenerateInput(prompt=[1, 2, 3], params=SamplingParams(max_tokens=4))
                )
                assert (await collect(s))[0] == reference([1, 2, 3], 4)
            restarts = h.sched.metrics.worker_restarts.labels("w0")._value.get()
            assert restarts >= 1

    asyncio.run(main())


def test_backpressure_cancel_deadline_idempotency() -> None:
    async def main() -> None:
        async with Harness(n=1, max_queue=5, step_delay_s=0.01) as h:
            h.links[0].break_stream()
            await h.links[0].stop()  # no worker: everything waits in the queue
            await asyncio.sleep(0.05)
            waiting = [
                h.sched.submit(GenerateInput(prompt=[1, 2], params=SamplingParams(max_tokens=3)))
                for _ in range(5)
            ]
            with pytest.raises(SchedulerError) as e:
                h.sched.submit(GenerateInput(prompt=[1, 2]))
            assert e.value.code == "RESOURCE_EXHAUSTED" and "5 requests" in e.value.message
            assert h.sched.cancel(waiting[0].request_id)
            toks, last, _ = await collect(waiting[0])
            assert last.error_code == "CANCELLED" and toks == []
            d = h.sched.submit(GenerateInput(prompt=[5], timeout_s=0.05))
            _, last, _ = await collect(d)
            assert last.error_code == "DEADLINE_EXCEEDED"
            # The same id again while live: the same request, not a second one.
            again = h.sched.submit(GenerateInput(prompt=[9, 9], request_id=waiting[1].request_id))
            assert again is waiting[1]
            # A worker returns: the queue drains.
            link = GrpcWorkerLink("w0", h._resolver(0), h.sched, LinkConfig(reconnect_s=0.05))
            h.links[0] = link
            h.sched.add_worker(link)
            link.start()
            rest = await asyncio.gather(*(collect(s) for s in waiting[1:]))
            assert all(r[0] == reference([1, 2], 3) for r in rest)
            # After finishing, a retry with the same id replays the result without re-running.
            before = h.engines[0].num_added
            replay = h.sched.submit(GenerateInput(prompt=[1, 2], request_id=waiting[1].request_id))
            toks, last, n = await collect(replay)
            assert toks == reference([1, 2], 3) and n == 1 and h.engines[0].num_added == before

    asyncio.run(main())


def test_invalid_requests_rejected_with_reason() -> None:
    async def main() -> None:
        async with Harness(n=1) as h:
            with pytest.raises(SchedulerError, match="outside the vocabulary"):
                h.sched.submit(GenerateInput(prompt=[1, 999]))
            with pytest.raises(SchedulerError, match="no tokenizer"):
                h.sched.submit(GenerateInput(prompt="hello"))
            with pytest.raises(SchedulerError, match="exactly one"):
                h.sched.submit(GenerateInput())
            with pytest.raises(SchedulerError, match="leaves no room"):
                h.sched.submit(GenerateInput(prompt=[1] * 4000))
            # The scheduler keeps serving.
            s = h.sched.submit(GenerateInput(prompt=[3], params=SamplingParams(max_tokens=2)))
            assert (await collect(s))[0] == reference([3], 2)

    asyncio.run(main())


def test_auth_token_passed_to_workers() -> None:
    async def main() -> None:
        async with Harness(n=1, token="s3cret") as h:
            assert h.sched.workers["w0"].connected
            s = h.sched.submit(GenerateInput(prompt=[4, 4], params=SamplingParams(max_tokens=3)))
            assert (await collect(s))[0] == reference([4, 4], 3)

    asyncio.run(main())


def test_unseeded_sampled_requests_get_one_seed_at_admission() -> None:
    """A requeued attempt must redraw the same position-keyed noise, so the seed is fixed once."""

    async def main() -> None:
        async with Harness(n=1) as h:
            sampled = h.sched.submit(
                GenerateInput(prompt=[3], params=SamplingParams(max_tokens=2, temperature=0.8))
            )
            greedy = h.sched.submit(GenerateInput(prompt=[3], params=SamplingParams(max_tokens=2)))
            seeded = h.sched.submit(
                GenerateInput(
                    prompt=[3], params=SamplingParams(max_tokens=2, temperature=1, seed=5)
                )
            )
            assert sampled.params.seed is not None
            assert greedy.params.seed is None and seeded.params.seed == 5
            for s in (sampled, greedy, seeded):
                await collect(s)

    asyncio.run(main())


def test_resubmitting_a_cancelled_id_runs_again_while_the_worker_still_aborts() -> None:
    """A killed batch job resumes with the same request ids while the worker may still be
    aborting the first attempts (seen under load: "request id '<id>~1' is already running on
    this session"). Every dispatch needs a wire id of its own."""

    async def main() -> None:
        async with Harness(n=1, step_delay_s=0.02) as h:
            p = SamplingParams(max_tokens=40)
            first = h.sched.submit(GenerateInput(prompt=[4, 2], params=p, request_id="job-c77"))
            while not first.tokens:
                await asyncio.sleep(0.005)
            assert h.sched.cancel("job-c77")
            again = h.sched.submit(GenerateInput(prompt=[4, 2], params=p, request_id="job-c77"))
            toks, last, _ = await collect(again)
            assert last.error_code is None, last
            assert toks == reference([4, 2], 40)

    asyncio.run(main())
