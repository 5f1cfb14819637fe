"""The scheduler: admission, batch formation, dispatch to worker links, exactly-once output.

Runs on one asyncio loop (inside the Ray scheduler actor, or a test). Imports neither ray nor
grpc: worker links (cluster/worker_rpc.py, or a fake in tests) call `worker_connected`,
`worker_events` and `worker_disconnected`, and the scheduler calls `link.send(...)`.

Exactly-once: each dispatch of a request is an *attempt* with its own wire id
"<request id>~<attempt>.<dispatch>", the dispatch number unique for the scheduler's life: a
request id submitted again after a cancel (a killed batch job resuming) must not collide with
its earlier attempt, which the worker may still be aborting. Only events of the current attempt are applied, each new token is
appended to the request's committed output once, and when a worker's stream breaks every
request in flight there is re-queued (ahead of the queue bound) with its committed prefix
(prompt + tokens emitted so far) as the new prompt, max_tokens reduced by what was emitted and
SamplingParams.num_resumed_tokens saying how much of that prompt is output (presence_penalty
counts it as output). Greedy and position-keyed seeded sampling depend only on that prefix, so
the client sees the same tokens as in a run without the fault.

Cost: nothing here scans every worker or every request per event. The fleet's free capacity
is an index (cluster/fleet.py) updated as requests are dispatched and released, admission
checks maxima recomputed when a worker connects, deadlines sit in timer heaps, and the loop
wakes only when a round could dispatch or a timer is due, so requests arriving within the
coalescing window (e.g. concurrent gateway calls) leave in one round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from cluster import requests as rq
from cluster.admission import EngineLimits, check_fits, new_request_state, pending_request
from cluster.metrics import SchedulerMetrics
from cluster.policy import Batch, BatchPolicy, Fleet, QueueFullError
from cluster.requests import Delta, GenerateInput, RequestState, SchedulerError
from cluster.scheduler_types import MAX_ATTEMPTS, SchedulerConfig, WorkerLink, WorkerSlot
from cluster.tokenizer import TextTokenizer
from cluster.worker_codec import WorkerRejection, WorkerStatus, WorkerSubmit
from contract.types import RequestOutput

log = logging.getLogger(__name__)
__all__ = ["MAX_ATTEMPTS", "Scheduler", "SchedulerConfig", "WorkerLink", "WorkerSlot"]


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig | None = None,
        tokenizer: TextTokenizer | None = None,
        metrics: SchedulerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        self.tokenizer = tokenizer
        self.metrics = metrics or SchedulerMetrics()
        self.clock = clock
        self.on_fatal = on_fatal  # e.g. exit the process so Ray restarts the actor
        self.policy = BatchPolicy(self.config.policy)
        self.fleet = Fleet()  # free capacity of serving workers, kept up to date incrementally
        self.limits: EngineLimits | None = None  # maxima over every worker seen (admission)
        self.failed: str | None = None  # set when the dispatch loop gave up (fail fast)
        self.workers: dict[str, WorkerSlot] = {}
        self.live: dict[str, RequestState] = {}
        self.finished: OrderedDict[str, RequestState] = OrderedDict()
        self._wire: dict[str, str] = {}  # current wire id -> request id
        self._dispatches = itertools.count(1)  # makes every wire id unique
        self._running_deadlines: list[tuple[float, str]] = []  # (deadline, wire id) in flight
        self._wake = asyncio.Event()
        self._armed_at: float | None = None  # clock time the loop's timer wakes it, if set
        self._outcomes: dict[str, Any] = {}  # labelled children of metrics.requests
        self._task: asyncio.Task[None] | None = None

    # -- workers ----------------------------------------------------------------------------
    def add_worker(self, link: WorkerLink, address: str = "", metrics_url: str = "") -> None:
        slot = WorkerSlot(link, address=address, metrics_url=metrics_url)
        self.workers[link.worker_id] = slot
        # Read at scrape time: nothing to update per dispatch.
        self.metrics.inflight.labels(link.worker_id).set_function(lambda: len(slot.inflight))

    def worker_connected(self, worker_id: str, status: WorkerStatus, address: str = "") -> None:
        slot = self.workers[worker_id]
        slot.status, slot.connected = status, True
        slot.address = address or slot.address
        slot.connections += 1
        if slot.connections > 1:
            self.metrics.worker_restarts.labels(worker_id).inc()
        self.limits = EngineLimits.of([s.status.engine for s in self.workers.values() if s.status])
        self._index(slot)
        self._count_connected()
        self._kick()

    def worker_disconnected(self, worker_id: str, reason: str = "") -> None:
        """The session broke: requeue everything in flight there from its committed prefix."""
        slot = self.workers.get(worker_id)
        if slot is None:
            return
        slot.connected = False
        self.fleet.remove(worker_id)
        inflight, slot.inflight, slot.kv_inflight = slot.inflight, {}, 0
        for wire_id, rid in inflight.items():
            self._wire.pop(wire_id, None)
            state = self.live.get(rid)
            if state is not None and state.wire_id == wire_id:
                self._requeue(state, f"worker {worker_id} lost: {reason}")
        self._count_connected()
        self._kick()

    def worker_events(self, worker_id: str, events: list[RequestOutput | WorkerRejection]) -> None:
        for ev in events:
            rid = self._wire.get(ev.request_id)
            state = self.live.get(rid) if rid is not None else None
            if state is None or state.wire_id != ev.request_id:
                continue  # a stale attempt (requeued or cancelled): its tokens are not ours
            if isinstance(ev, WorkerRejection):
                self._release(state)
                if ev.code == rq.INVALID_ARGUMENT:
                    self._finish(state, "error", rq.INVALID_ARGUMENT, f"{ev.field}: {ev.message}")
                else:
                    self._requeue(state, f"worker {worker_id} refused: {ev.code} {ev.message}")
                continue
            self._apply(state, ev, worker_id)

    # -- requests -----------------------------------------------------------------------------
    def submit(self, inp: GenerateInput) -> RequestState:
        """Admit a request (or attach to the live/finished one with the same id)."""
        rid = inp.request_id or f"req-{uuid.uuid4().hex}"
        existing = self.live.get(rid) or self.finished.get(rid)
        if existing is not None and not (existing.final and existing.final.error_code):
            return existing  # idempotent retry
        if self.failed is not None:
            raise SchedulerError(rq.UNAVAILABLE, f"the scheduler failed: {self.failed}")
        if len(self.policy) >= self.config.policy.max_queue:
            # Refuse before tokenizing: a full queue must be cheap to hear about.
            self.metrics.rejected.labels("queue_full").inc()
            raise SchedulerError(
                rq.RESOURCE_EXHAUSTED,
                f"waiting queue is full ({self.config.policy.max_queue} requests): retry later",
            )
        state = new_request_state(rid, inp, self.tokenizer, self.clock())
        pending = pending_request(state, self.limits)
        check_fits(state.prompt, state.params.max_tokens, pending.kv_tokens, self.limits)
        try:
            self.policy.submit(pending)
        except QueueFullError as e:
            self.metrics.rejected.labels("queue_full").inc()
            raise SchedulerError(rq.RESOURCE_EXHAUSTED, str(e)) from None
        self.finished.pop(rid, None)
        self.live[rid] = state
        # Coalescing: wake the loop only when a round could dispatch now, or when this
        # request's timer comes before the loop's; otherwise the timer's round takes it along
        # with every other arrival of the window (one round for many concurrent calls).
        if self.policy.may_leave(self.fleet.total_free_slots) or (
            self._armed_at is None or self.policy.first_timer(pending) < self._armed_at
        ):
            self._kick()
        return state

    def cancel(self, request_id: str) -> bool:
        state = self.live.get(request_id)
        if state is None:
            return False
        self._finish(state, "abort", rq.CANCELLED, "cancelled by the client")
        return True

    # -- the loop ------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for state in list(self.live.values()):
            self._finish(state, "abort", rq.UNAVAILABLE, "the scheduler is shutting down")

    def _kick(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            self._wake.clear()
            now = self.clock()
            try:
                self._tick(now)
                failures = 0
            except Exception as e:  # a bug here must neither stop dispatching silently ...
                failures += 1
                self.metrics.tick_failures.inc()
                log.exception("scheduler tick failed (%d in a row)", failures)
                if failures >= self.config.max_tick_failures:  # ... nor be retried forever
                    self._fail_fast(f"dispatch failed {failures} times in a row: {e!r}")
                    return
                await asyncio.sleep(0.01)
                continue
            if self._wake.is_set():
                await asyncio.sleep(0)  # something arrived during the tick: go again soon
                continue
            wake = self._armed_at = self._next_wakeup(now)
            timer = None
            if wake is not None:
                delay = max(wake - self.clock(), 0.0005)
                timer = loop.call_at(loop.time() + delay, self._wake.set)
            await self._wake.wait()
            self._armed_at = None
            if timer is not None:
                timer.cancel()

    def _next_wakeup(self, now: float) -> float | None:
        wake = self.policy.next_wakeup(now)
        heap = self._running_deadlines
        while heap and not self._running(heap[0][1]):
            heapq.heappop(heap)  # finished or requeued since
        if heap and (wake is None or heap[0][0] < wake):
            wake = heap[0][0]
        return wake

    def _running(self, wire_id: str) -> RequestState | None:
        rid = self._wire.get(wire_id)
        state = self.live.get(rid) if rid is not None else None
        return state if state is not None and state.wire_id == wire_id else None

    def _fail_fast(self, reason: str) -> None:
        log.critical("scheduler failing fast: %s", reason)
        self.failed = reason
        for state in list(self.live.values()):
            self._finish(state, "abort", rq.UNAVAILABLE, f"the scheduler failed: {reason}")
        if self.on_fatal is not None:
            self.on_fatal(reason)

    def _tick(self, now: float) -> None:
        self._expire(now)
        if self.fleet.total_free_slots > 0 and len(self.policy):
            for batch in self.policy.form_batches(self.fleet, now):
                self._dispatch(batch, now)
        self.metrics.queue_depth.set(len(self.policy))

    def _expire(self, now: float) -> None:
        for p in self.policy.expire(now):
            state = self.live.get(p.request_id)
            if state is not None:
                self._finish(state, "abort", rq.DEADLINE_EXCEEDED, "deadline passed while queued")
        heap = self._running_deadlines
        while heap and heap[0][0] <= now:
            state = self._running(heapq.heappop(heap)[1])
            if state is not None:
                self._finish(state, "abort", rq.DEADLINE_EXCEEDED, "deadline passed")

    def _push_running_deadline(self, deadline: float, wire_id: str) -> None:
        heap = self._running_deadlines
        heapq.heappush(heap, (deadline, wire_id))
        if len(heap) > 2 * len(self._wire) + 64:  # mostly finished attempts: drop them
            self._running_deadlines = [e for e in heap if self._running(e[1]) is not None]
            heapq.heapify(self._running_deadlines)

    def _index(self, slot: WorkerSlot) -> None:
        """Tell the fleet index what this worker can take now (or that it takes nothing)."""
        cap = slot.capacity()
        if cap is None:
            self.fleet.remove(slot.link.worker_id)
        else:
            self.fleet.set(cap)

    def _dispatch(self, batch: Batch, now: float) -> None:
        slot = self.workers[batch.worker_id]
        submits = []
        for p in batch.requests:
            state = self.live[p.request_id]
            state.attempt += 1
            state.wire_id = f"{state.request_id}~{state.attempt}.{next(self._dispatches)}"
            state.worker_id, state.kv_tokens = batch.worker_id, p.kv_tokens
            state.cur_draft = state.cur_accepted = 0
            if state.first_dispatch is None:
                state.first_dispatch = now
                self.metrics.queue_time.observe(now - state.arrival)
            self._wire[state.wire_id] = state.request_id
            slot.inflight[state.wire_id] = state.request_id
            slot.kv_inflight += p.kv_tokens
            if state.deadline is not None:
                self._push_running_deadline(state.deadline, state.wire_id)
            params = state.params
            if state.tokens:
                # The committed output travels as prompt; the worker still counts it as output.
                params = dataclasses.replace(
                    params,
                    max_tokens=state.remaining,
                    num_resumed_tokens=params.num_resumed_tokens + len(state.tokens),
                )
            submits.append(WorkerSubmit(state.wire_id, state.committed_prefix, params))
        self.metrics.batch_size.observe(len(batch.requests))
        self.metrics.padding_ratio.observe(batch.padding_ratio)
        slot.link.send(submits, [])

    # -- per-request transitions ---------------------------------------------------------------
    def _apply(self, state: RequestState, ev: RequestOutput, worker_id: str) -> None:
        take = ev.new_tokens[: max(state.remaining, 0)]
        take_lp = (ev.new_logprobs or [])[: len(take)]
        state.cur_draft, state.cur_accepted = ev.num_draft_tokens, ev.num_accepted_tokens
        state.cur_cached = ev.num_cached_tokens
        text = ""
        if take:
            state.tokens.extend(take)
            state.logprobs.extend(take_lp)
            text = state.detok.push(take) if state.detok else ""
            self.metrics.generated_tokens.inc(len(take))
        if not ev.finished:
            if take:
                state.text += text
                state.publish(Delta(state.request_id, text, take, logprobs=state.lp(take_lp)))
            return
        self._release(state)
        if ev.finish_reason == "abort":  # the worker dropped it (draining): run it elsewhere
            state.text += text
            if take:
                state.publish(Delta(state.request_id, text, take, logprobs=state.lp(take_lp)))
            self._requeue(state, f"worker {worker_id} aborted the attempt")
            return
        if ev.finish_reason == "error":
            state.text += text
            self._finish(state, "error", rq.INTERNAL, ev.error or "engine error", take, text)
            return
        state.text += text
        self._finish(state, ev.finish_reason or "stop", None, None, take, text)

    def _requeue(self, state: RequestState, why: str) -> None:
        state.wire_id, state.worker_id, state.kv_tokens = None, None, 0
        state.base_draft += state.cur_draft
        state.base_accepted += state.cur_accepted
        state.cur_draft = state.cur_accepted = 0
        if state.remaining <= 0:
            self._finish(state, "length", None, None)
            return
        if state.attempt >= MAX_ATTEMPTS:
            self._finish(
                state, "error", rq.UNAVAILABLE, f"gave up after {state.attempt} attempts: {why}"
            )
            return
        state.requeues += 1
        self.metrics.requeues.inc()
        self.policy.submit(pending_request(state, self.limits), requeue=True)
        self._kick()

    def _release(self, state: RequestState) -> None:
        """Free the worker capacity held by the current attempt (the state keeps its ids)."""
        if state.wire_id is None:
            return
        self._wire.pop(state.wire_id, None)
        slot = self.workers.get(state.worker_id or "")
        if slot is not None and slot.inflight.pop(state.wire_id, None) is not None:
            slot.kv_inflight -= state.kv_tokens
            self.fleet.release(slot.link.worker_id, state.kv_tokens)
            if self.policy.may_leave(self.fleet.total_free_slots):
                self._kick()  # a freed slot lets a waiting request go

    def _finish(
        self,
        state: RequestState,
        reason: str,
        code: str | None,
        message: str | None,
        last_tokens: list[int] | None = None,
        last_text: str = "",
    ) -> None:
        if state.finished:
            return
        if state.wire_id is not None:
            slot = self.workers.get(state.worker_id or "")
            if slot is not None and slot.connected and state.wire_id in slot.inflight:
                slot.link.send([], [state.wire_id])  # stop the row on the worker
            self._release(state)
            state.wire_id = None
        self.policy.cancel(state.request_id)
        state.finish(reason, code, message, last_tokens or [], last_text)
        self.live.pop(state.request_id, None)
        outcome = self._outcomes.get(code or "ok")
        if outcome is None:
            outcome = self._outcomes[code or "ok"] = self.metrics.requests.labels(code or "ok")
        outcome.inc()
        if self.config.finished_cache_size:
            self.finished[state.request_id] = state
            while len(self.finished) > self.config.finished_cache_size:
                self.finished.popitem(last=False)

    # -- admission helpers -----------------------------------------------------------------
    def _count_connected(self) -> None:
        self.metrics.workers_connected.set(sum(s.connected for s in self.workers.values()))
