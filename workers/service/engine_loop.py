"""The engine's own thread: the only caller of `Engine.step()`.

Network handlers never touch the engine directly; they post commands (submit, abort, info) to a
queue that this thread applies between rounds, and they receive outputs through per-session
sinks, which must not block (the gRPC server's sink is `loop.call_soon_threadsafe`). So a slow
or dead client can never stall the batch, and the engine never waits on the network.

Request ids are scoped per session: engine id = f"{session_id}/{client_id}", so two schedulers
may reuse ids without colliding, and closing a session aborts exactly its own requests.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from contract.status import StatusCode, WorkerState
from protos.worker_codec import RequestError, SubmitRequest
from workers.types import EngineInfo, RequestOutput, RoundStats, SamplingParams

log = logging.getLogger(__name__)

# A sink receives a list of outputs/errors for its session, or an exception when the engine died.
Sink = Callable[[list[RequestOutput | RequestError] | BaseException], None]


class EngineLike(Protocol):
    """The slice of workers.Engine (workers/engine.py) this loop calls; test engines implement
    exactly this (tests/fake_engine.py)."""

    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams) -> None: ...
    def abort(self, request_id: str) -> None: ...
    def step(self) -> list[RequestOutput]: ...
    def has_work(self) -> bool: ...
    def info(self) -> EngineInfo: ...
    def take_round_stats(self) -> list[RoundStats]: ...


class MetricsSink(Protocol):
    def on_request_added(self, request_id: str, now: float) -> None: ...
    def on_round(self, stats: RoundStats) -> None: ...
    def on_outputs(self, outputs: list[RequestOutput], now: float) -> None: ...
    def set_queue(self, num_running: int, num_waiting: int) -> None: ...
    def set_prefix_cache(self, info: EngineInfo) -> None: ...


class WorkerUnavailable(Exception):
    """The engine is loading, draining or dead; maps to gRPC UNAVAILABLE."""


@dataclass(frozen=True)
class EngineLoopConfig:
    max_live_requests: int = 4096  # submitted and not finished, over all sessions
    idle_wait_s: float = 0.05  # how long an idle loop blocks on the command queue

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_live_requests, bool)
            or not isinstance(self.max_live_requests, int)
            or self.max_live_requests < 1
        ):
            raise ValueError(
                f"EngineLoopConfig.max_live_requests={self.max_live_requests!r} is invalid: pass an int >= 1"
            )
        if not self.idle_wait_s > 0:
            raise ValueError(
                f"EngineLoopConfig.idle_wait_s={self.idle_wait_s!r} is invalid: pass a value > 0"
            )


class EngineLoop:
    def __init__(
        self,
        engine_factory: Callable[[], EngineLike],
        config: EngineLoopConfig | None = None,
        metrics: MetricsSink | None = None,
        on_state: Callable[[WorkerState], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.config = config or EngineLoopConfig()
        self._factory = engine_factory
        self._metrics = metrics
        self._on_state = on_state
        self._on_fatal = on_fatal
        self._commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._sinks: dict[int, Sink] = {}
        self._live: dict[str, tuple[int, str]] = {}  # engine id -> (session id, client id)
        self._session_ids: dict[int, set[str]] = {}  # session id -> engine ids
        self._lock = threading.Lock()  # guards state and sinks (read by handler threads)
        self._next_session = 0
        self.state = WorkerState.LOADING  # loading -> serving -> draining -> stopped | failed
        self.engine: EngineLike | None = None
        self.fatal_error: BaseException | None = None
        self._idle = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specfleet-engine", daemon=True)

    # ------------------------------------------------------------ any thread

    def start(self) -> None:
        self._thread.start()

    def open_session(self, sink: Sink) -> int:
        with self._lock:
            self._next_session += 1
            self._sinks[self._next_session] = sink
            return self._next_session

    def close_session(self, session_id: int) -> None:
        """Forget the sink and abort every unfinished request of this session."""
        with self._lock:
            self._sinks.pop(session_id, None)
        self._commands.put(("close", session_id))

    def submit(self, session_id: int, requests: list[SubmitRequest]) -> None:
        if requests:
            self._commands.put(("submit", (session_id, requests)))

    def abort(self, session_id: int, client_ids: list[str]) -> None:
        if client_ids:
            self._commands.put(("abort", (session_id, client_ids)))

    def info(self) -> Future[EngineInfo]:
        fut: Future[EngineInfo] = Future()
        if self.state in (WorkerState.LOADING, WorkerState.STOPPED, WorkerState.FAILED):
            fut.set_exception(WorkerUnavailable(f"worker is {self.state}"))
        else:
            self._commands.put(("info", fut))
        return fut

    def drain(self, timeout: float) -> bool:
        """Refuse new requests, wait up to `timeout` s for running ones; True if all finished."""
        self._set_state(WorkerState.DRAINING)
        self._idle.clear()
        self._commands.put(("wake", None))
        return self._idle.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self._commands.put(("stop", None))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state == WorkerState.LOADING:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return self.state in (WorkerState.SERVING, WorkerState.DRAINING)

    # ------------------------------------------------------------ engine thread

    @property
    def _engine(self) -> EngineLike:
        assert self.engine is not None, "engine used before it was built"
        return self.engine

    def _set_state(self, state: WorkerState) -> None:
        with self._lock:
            if self.state in (WorkerState.STOPPED, WorkerState.FAILED) or self.state == state:
                return
            self.state = state
        if self._on_state is not None:
            self._on_state(state)

    def _run(self) -> None:
        try:
            self.engine = self._factory()
        except BaseException as e:  # a model that cannot load is fatal for this worker
            self._fail(e)
            return
        self._set_state(WorkerState.SERVING)
        try:
            while self._apply_commands(block=not self._engine.has_work()):
                if self._engine.has_work():
                    self._step()
                elif self.state == WorkerState.DRAINING:
                    self._idle.set()
        except BaseException as e:
            self._fail(e)
            return
        self._set_state(WorkerState.STOPPED)
        self._stopped.set()

    def _apply_commands(self, block: bool) -> bool:
        """Apply queued commands; False once asked to stop."""
        try:
            cmds = [
                self._commands.get(timeout=self.config.idle_wait_s)
                if block
                else self._commands.get_nowait()
            ]
        except queue.Empty:
            return True
        while True:
            try:
                cmds.append(self._commands.get_nowait())
            except queue.Empty:
                break
        for kind, arg in cmds:
            if kind == "stop":
                return False
            if kind == "submit":
                self._add(*arg)
            elif kind == "abort":
                session_id, client_ids = arg
                for cid in client_ids:
                    self._abort(f"{session_id}/{cid}")
            elif kind == "close":
                for eid in list(self._session_ids.get(arg, ())):
                    self._abort(eid)
            elif kind == "info":
                if not arg.set_running_or_notify_cancel():
                    continue
                try:
                    arg.set_result(self._engine.info())
                except Exception as e:
                    arg.set_exception(e)
        return True

    def _add(self, session_id: int, requests: list[SubmitRequest]) -> None:
        errors: list[RequestOutput | RequestError] = []
        info = self._engine.info()
        now = time.monotonic()
        for req in requests:
            eid = f"{session_id}/{req.request_id}"
            err = None
            if self.state != WorkerState.SERVING:
                err = RequestError(
                    req.request_id,
                    StatusCode.UNAVAILABLE,
                    "submit",
                    f"worker is {self.state}; send it to another worker",
                )
            elif eid in self._live:
                err = RequestError(
                    req.request_id,
                    StatusCode.INVALID_ARGUMENT,
                    "id",
                    f"request id {req.request_id!r} is already running on this session",
                )
            elif len(self._live) >= self.config.max_live_requests:
                err = RequestError(
                    req.request_id,
                    StatusCode.RESOURCE_EXHAUSTED,
                    "submit",
                    f"worker holds max_live_requests={self.config.max_live_requests}; retry later or elsewhere",
                )
            elif bad := [t for t in req.prompt if t >= info.vocab_size]:
                err = RequestError(
                    req.request_id,
                    StatusCode.INVALID_ARGUMENT,
                    "prompt",
                    f"token id {bad[0]} is outside the vocabulary (vocab_size={info.vocab_size})",
                )
            if err is None:
                try:
                    self._engine.add_request(eid, req.prompt, req.params)
                except (
                    ValueError,
                    TypeError,
                ) as e:  # engine validation (empty prompt, context ...)
                    err = RequestError(
                        req.request_id, StatusCode.INVALID_ARGUMENT, "submit", str(e)
                    )
                except Exception as e:  # an engine bug on one request must not kill the worker
                    log.exception("add_request(%r) failed", eid)
                    err = RequestError(
                        req.request_id, StatusCode.INTERNAL, "submit", f"{type(e).__name__}: {e}"
                    )
            if err is not None:
                errors.append(err)
                continue
            self._live[eid] = (session_id, req.request_id)
            self._session_ids.setdefault(session_id, set()).add(eid)
            if self._metrics is not None:
                self._metrics.on_request_added(eid, now)
        if errors:
            self._deliver(session_id, errors)

    def _abort(self, eid: str) -> None:
        if eid in self._live:
            self._engine.abort(eid)

    def _step(self) -> None:
        outputs = self._engine.step()
        now = time.monotonic()
        if self._metrics is not None:
            for stats in self._engine.take_round_stats():
                self._metrics.on_round(stats)
            self._metrics.on_outputs(outputs, now)
            info = self._engine.info()
            self._metrics.set_queue(info.num_running, info.num_waiting)
            self._metrics.set_prefix_cache(info)
        by_session: dict[int, list[RequestOutput | RequestError]] = {}
        for out in outputs:
            owner = self._live.get(out.request_id)
            if owner is None:
                continue
            session_id, client_id = owner
            if out.finished:
                del self._live[out.request_id]
                self._session_ids[session_id].discard(out.request_id)
                if not self._session_ids[session_id]:
                    del self._session_ids[session_id]
            # Clients see their own ids; a copy keeps the engine's object untouched.
            by_session.setdefault(session_id, []).append(_with_id(out, client_id))
        for session_id, items in by_session.items():
            self._deliver(session_id, items)

    def _deliver(
        self, session_id: int, items: list[RequestOutput | RequestError] | BaseException
    ) -> None:
        with self._lock:
            sink = self._sinks.get(session_id)
        if sink is None:
            return
        try:
            sink(items)
        except Exception:  # a closed session's event loop: drop, the close command follows
            log.debug("dropping outputs for closed session %s", session_id, exc_info=True)

    def _fail(self, error: BaseException) -> None:
        log.error("engine failed: %r", error, exc_info=error)
        self.fatal_error = error
        with self._lock:
            self.state = WorkerState.FAILED
            sessions = list(self._sinks)
        for session_id in sessions:
            self._deliver(session_id, error)
        if self._on_state is not None:
            self._on_state(WorkerState.FAILED)
        self._idle.set()
        self._stopped.set()
        if self._on_fatal is not None:
            self._on_fatal(error)


def _with_id(out: RequestOutput, client_id: str) -> RequestOutput:
    copy = RequestOutput(**{**out.__dict__})
    copy.request_id = client_id
    return copy
