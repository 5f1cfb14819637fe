"""What the scheduler spends per request as the fleet grows: the real `Scheduler` with simulated
workers that answer at once (no engine, no Ray), driven in-process and through the real gRPC
gateway on loopback.

    .venv/bin/python bench/scheduler_sim.py [--out bench/results/scheduler_sim.json]
        [--workers 1 8 64 256] [--requests 20000] [--label after]

Each simulated worker has 32 slots; a request is 16 prompt tokens and 16 new tokens, answered in
one finished event per dispatch message (one engine step), so the only work left is the
scheduler's (and, on the gateway path, gRPC's). In-process: one asyncio loop holds the scheduler,
the simulated workers and a driver keeping `--window` requests in flight. Scheduler CPU per
request there = loop-thread CPU minus what the driver and the simulated workers spent (each
measured around its own code). Gateway: the same scheduler behind `GatewayServer`; client
processes (`--client`) keep `--concurrency` unary Submit calls in flight; the server's CPU per
request is the whole server process (gRPC threads included), the scheduler's share is the CPU
spent inside the scheduler's own methods.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster.client import make_input  # noqa: E402
from cluster.policy import PolicyConfig  # noqa: E402
from cluster.requests import Delta, GenerateInput, RequestState  # noqa: E402
from cluster.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from cluster.worker_codec import WorkerStatus, WorkerSubmit  # noqa: E402
from contract.types import EngineInfo, RequestOutput, SamplingParams  # noqa: E402

SLOTS = 32
PROMPT = list(range(1, 17))  # 16 tokens
ANSWER = list(range(100, 116))  # 16 tokens
# Scheduler methods timed on the gateway path (those missing in a version are skipped).
TIMED = ("submit", "submit_many", "worker_events", "cancel", "_tick", "_pass")


class Meter:
    """Thread CPU spent inside wrapped code, nested calls counted once."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self._depth = 0
        self._t0 = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            if self._depth == 0:
                self._t0 = time.thread_time()
            self._depth += 1
            try:
                return fn(*a, **kw)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.cpu += time.thread_time() - self._t0

        return timed


class SimLink:
    """A worker that finishes every request of a dispatch message in one engine step."""

    def __init__(self, worker_id: str, sched: Scheduler, meter: Meter) -> None:
        self.worker_id, self.sched, self.meter = worker_id, sched, meter
        self.loop = asyncio.get_running_loop()

    def send(self, submit: list[WorkerSubmit], abort: list[str]) -> None:
        t0 = time.thread_time()
        if submit:
            self.loop.call_soon(self._answer, submit)
        self.meter.cpu += time.thread_time() - t0

    def _answer(self, submit: list[WorkerSubmit]) -> None:
        t0 = time.thread_time()
        events = [
            RequestOutput(s.request_id, ANSWER[: s.params.max_tokens], True, "length")
            for s in submit
        ]
        self.meter.cpu += time.thread_time() - t0
        self.sched.worker_events(self.worker_id, events)  # type: ignore[arg-type]


def status(worker_id: str) -> WorkerStatus:
    info = EngineInfo("sim", 1024, 8192, "none", 0, SLOTS, 0, 0, SLOTS, 1 << 20, 0)
    return WorkerStatus(worker_id, "serving", info)


def make_scheduler(n_workers: int, sim: Meter) -> Scheduler:
    sched = Scheduler(SchedulerConfig(PolicyConfig(max_queue=1 << 16)))
    for i in range(n_workers):
        sched.add_worker(SimLink(f"w{i}", sched, sim))
        sched.worker_connected(f"w{i}", status(f"w{i}"))
    return sched


class Finish:
    """Stands in for a subscriber queue: records when the final delta arrives."""

    def __init__(self, t0: float, done: Callable[[float], None]) -> None:
        self.t0, self.done = t0, done

    def put_nowait(self, d: Delta) -> None:
        if d.finished:
            self.done(time.perf_counter() - self.t0)


async def in_process(n_workers: int, n_requests: int, window: int) -> dict[str, Any]:
    sim, driver = Meter(), Meter()
    sched = make_scheduler(n_workers, sim)
    sched.start()
    params = SamplingParams(max_tokens=len(ANSWER))
    lat: list[float] = []
    wake = asyncio.Event()
    inflight = 0

    def done(dt: float) -> None:
        nonlocal inflight
        lat.append(dt)
        inflight -= 1
        if inflight <= window // 2:
            wake.set()

    await asyncio.sleep(0)
    cpu0, t0 = time.thread_time(), time.perf_counter()
    sent = 0
    while sent < n_requests:
        d0 = time.thread_time()
        sub = 0.0
        while inflight < window and sent < n_requests:
            inp = GenerateInput(PROMPT, None, params, f"r{sent}")
            s0 = time.thread_time()
            state: RequestState = sched.submit(inp)
            sub += time.thread_time() - s0
            state.subscribers.append(Finish(time.perf_counter(), done))  # type: ignore[arg-type]
            sent += 1
            inflight += 1
        driver.cpu += time.thread_time() - d0 - sub
        wake.clear()
        await wake.wait()
    while inflight:
        wake.clear()
        await wake.wait()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    await sched.stop()
    sched_cpu = cpu - sim.cpu - driver.cpu
    return summary(n_workers, n_requests, wall, lat, sched_cpu, window, "in-process")


def summary(
    n_workers: int,
    n: int,
    wall: float,
    lat: list[float],
    sched_cpu: float,
    inflight: int,
    path: str,
    **extra: Any,
) -> dict[str, Any]:
    lat = sorted(lat)
    return {
        "workers": n_workers,
        "path": path,
        "requests": n,
        "in_flight": inflight,
        "req_per_s": n / wall,
        "scheduler_cpu_us_per_req": 1e6 * sched_cpu / n,
        "p50_ms": 1e3 * lat[len(lat) // 2],
        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        **extra,
    }


# -- gateway path -------------------------------------------------------------------------------
async def client_main(address: str, n: int, concurrency: int, tag: str, chunk: int) -> None:
    """One client process: `concurrency` calls in flight, n requests in all: unary Submit
    calls (chunk 0) or SubmitBatch calls of `chunk` requests (what `specfleet batch` sends)."""
    import grpc

    from protos.gateway_codec import request_to_pb
    from protos.specfleet.v1 import gateway_pb2 as pb
    from protos.specfleet.v1 import gateway_pb2_grpc as pb_grpc

    msgs = [
        request_to_pb(make_input(PROMPT, request_id=f"{tag}-{i}", max_tokens=len(ANSWER)))
        for i in range(n)
    ]
    lat: list[float] = []
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pb_grpc.GatewayStub(ch)
        it = iter(msgs)

        async def worker() -> None:
            for m in it:
                t0 = time.perf_counter()
                await stub.Submit(m)
                lat.append(time.perf_counter() - t0)

        chunks = iter([msgs[i : i + chunk] for i in range(0, n, chunk)] if chunk else [])

        async def batch_worker() -> None:
            for c in chunks:
                t0 = time.perf_counter()
                resp = await stub.SubmitBatch(pb.SubmitBatchRequest(requests=c))
                assert all(item.HasField("result") for item in resp.items), resp.items[0]
                lat.extend([time.perf_counter() - t0] * len(c))

        t0 = time.perf_counter()
        work = batch_worker if chunk else worker
        await asyncio.gather(*(work() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    print(json.dumps({"wall": wall, "lat": lat}))


async def through_gateway(
    n_workers: int, n_requests: int, concurrency: int, clients: int, chunk: int = 0
) -> dict[str, Any]:
    from cluster.gateway_server import GatewayServer

    sim, meter = Meter(), Meter()
    sched = make_scheduler(n_workers, sim)
    for name in TIMED:
        if hasattr(sched, name):
            setattr(sched, name, meter.wrap(getattr(sched, name)))
    sched.start()
    gw = await GatewayServer(sched).start()
    per = n_requests // clients
    await run_clients(gw.address, [min(per, 500)], concurrency, "warm", chunk)
    meter.cpu = sim.cpu = 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    outs = await run_clients(gw.address, [per] * clients, concurrency, "run", chunk)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await gw.stop(0.5)
    await sched.stop()
    lat = [x for o in outs for x in o["lat"]]
    client_wall = max(o["wall"] for o in outs)
    return summary(
        n_workers,
        len(lat),
        client_wall,
        lat,
        meter.cpu,
        concurrency * clients,
        f"gateway, SubmitBatch of {chunk}" if chunk else "gateway, unary Submit",
        server_cpu_us_per_req=1e6 * (cpu - sim.cpu) / len(lat),
        server_wall_s=wall,
    )


async def run_clients(
    address: str, ns: list[int], concurrency: int, tag: str, chunk: int
) -> list[dict]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--client",
            address,
            "--requests",
            str(n),
            "--concurrency",
            str(concurrency),
            "--label",
            f"{tag}{i}",
            "--chunk",
            str(chunk),
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )  # fmt: skip
        for i, n in enumerate(ns)
    ]
    outs = []
    for p in procs:
        out, _ = await p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"client exited with {p.returncode}")
        outs.append(json.loads(out.decode().strip().splitlines()[-1]))
    return outs


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median req/s, plus the spread of all runs."""
    runs = sorted(runs, key=lambda r: r["req_per_s"])
    mid = dict(runs[len(runs) // 2])
    mid["req_per_s_runs"] = [round(r["req_per_s"]) for r in runs]
    return mid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--gateway-requests", type=int, default=8_000)
    ap.add_argument("--window", type=int, default=256, help="in-process requests in flight")
    ap.add_argument("--concurrency", type=int, default=64, help="calls in flight per client")
    ap.add_argument("--clients", type=int, default=1, help="client processes (gateway path)")
    ap.add_argument("--chunk", type=int, default=512, help="SubmitBatch size (gateway path)")
    ap.add_argument(
        "--batch-concurrency", type=int, default=4, help="SubmitBatch calls in flight per client"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-gateway", action="store_true")
    ap.add_argument("--label", default="after")
    ap.add_argument("--client", metavar="ADDRESS", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="bench/results/scheduler_sim.json")
    args = ap.parse_args()
    if args.client:
        asyncio.run(
            client_main(args.client, args.requests, args.concurrency, args.label, args.chunk)
        )
        return
    rows: dict[str, dict[str, Any]] = {}
    for w in args.workers:
        runs = [asyncio.run(in_process(w, args.requests, args.window)) for _ in range(args.repeats)]
        rows[str(w)] = {"in_process": median_run(runs)}
        print(json.dumps(rows[str(w)]["in_process"]), file=sys.stderr)
        if not args.skip_gateway:
            g = asyncio.run(
                through_gateway(w, args.gateway_requests, args.concurrency, args.clients)
            )
            rows[str(w)]["gateway"] = g
            print(json.dumps(g), file=sys.stderr)
            if args.chunk:
                b = asyncio.run(
                    through_gateway(
                        w, args.requests, args.batch_concurrency, args.clients, args.chunk
                    )
                )
                rows[str(w)]["gateway_batch"] = b
                print(json.dumps(b), file=sys.stderr)
    out_path = Path(args.out)
    data: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    if args.label in data:  # a run for more worker counts adds rows to the same label
        rows = {**data[args.label]["rows"], **rows}
    data[args.label] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores (shared with other jobs)",
        "load_average_end": os.getloadavg(),
        "requests": args.requests,
        "gateway_requests": args.gateway_requests,
        "gateway_clients": args.clients,
        "gateway_concurrency_per_client": args.concurrency,
        "gateway_batch_chunk": args.chunk,
        "gateway_batch_calls_in_flight": args.batch_concurrency,
        "slots_per_worker": SLOTS,
        "median_of": args.repeats,
        "rows": rows,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out_path} [{args.label}]", file=sys.stderr)


if __name__ == "__main__":
    main()
