"""Launching pipelined rounds from a thread of their own, so that building the next round in
Python overlaps MLX encoding this one.

On a GPU a small model's round is bound by the host, in two serial parts: Python builds the
round's lazy graph, then `mx.async_eval` walks it and encodes every primitive (MLX CUDA: ~3 us
each, 11 for a cuBLASLt matmul; H200, random Qwen3.5-shape peer, B=8: an MTP round 7.2 ms, of
which 4.5 ms encoding and ~2 ms Python). Here a launcher thread calls `async_eval` (it releases
the GIL) while the engine thread reads the last round back and builds the next, so a round
costs about the larger part instead of the sum. On a host with cores to spare for it: a Mac's
or a GPU server's. On the 2-core CPU VM it did not pay: there the launch is CPU work of its own
(MLX's CPU backend computes while it launches, `Backend.computes_in_launch`), and three busy
threads share two cores (plain B=1 6.46 against 6.14 ms a step, depth-3 MTP 11.6 against 11.0).

MLX's rule for this (`mx.new_thread_unsafe_stream`): a graph built on such a stream may be
evaluated in any thread, one evaluation at a time. So an engine that launches this way makes
the launcher's stream its thread's default (`adopt`: a thread's own stream cannot cross to
another thread), evaluates what its caller left lazy first (`materialize`), and while a step
routes through the launcher (`routing`):
- `async_eval` hands arrays to the launcher thread, in order, and returns a `Ticket`;
- launched arrays are read with `Ticket.read`: after its launch a read only waits for the
  compute (`array::eval` of a scheduled array touches no stream), and reads arrays no later
  graph takes as inputs (`Flight.host`), so the launcher never touches what the host reads;
- `evaluate_behind` queues arrays nobody reads back (a joiner's prefill chunk, prefix-cache
  copies: launched only to free their graphs) behind the launches before them, without
  waiting for the thread to take them.
When a launch fails (a round, or one nobody reads), every launch queued after it fails with its
error without running: they may build on arrays it left scheduled but never computed (the next
round is built and launched before the failed one is read). The engine thread raises the error
at its next hand-off or `Engine.settle()`, where the failed round is read, or takes it in the
failed step's error handler; the thread then runs launches again.
Only graph building runs beside a launch: rows leave (a gather of the cache) and join (the
prefill queued behind the round) without waiting for it (workers/pipelined_rounds.py
`_pipelined_step`). A step may return with its launch still being encoded, so other MLX work
on the engine's thread between steps waits first (`Engine.settle()`); the service's engine
loop does none (workers/service/engine_loop.py), `Engine.generate` ends idle. (Stop 32's
full-suite segfaults were such work: a benchmark's timing wrappers, leaked into later tests,
evaluated inside the rounds an engine built; bench/results/s32/README.md.)
Elsewhere these are MLX's own calls.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from workers.backend import Backend

_local = threading.local()  # .launcher: the Launcher the step on this thread routes through


class Ticket:
    """One launch: set once the launcher thread has scheduled every array it covers."""

    def __init__(self) -> None:
        self._started = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        # Seconds the hand-off waited for the launcher thread to finish the launch before
        # (its encode, a graph switch or build for a new shape among it)
        self.handoff_s = 0.0

    def wait(self) -> None:
        self._done.wait()
        if self._error is not None:
            raise self._error

    def read(self, array: mx.array, dtype: Any) -> np.ndarray:
        """A launched array on the host: waits for its compute, evaluates nothing."""
        self.wait()
        return np.array(array, dtype=dtype)


class Launcher:
    """A launcher thread and the stream its graphs live on."""

    def __init__(self, device: mx.Device) -> None:
        self.stream = mx.new_thread_unsafe_stream(device)
        self._queue: queue.SimpleQueue[tuple[list, Ticket]] = queue.SimpleQueue()
        self._last = Ticket()
        self._last._done.set()
        # Set by the launcher thread when a launch fails: the launches queued after it may build
        # on arrays it left scheduled but never computed, so they fail with its error without
        # running until the engine thread takes it (`take_failure`).
        self._poisoned: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="specfleet-launcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            arrays, ticket = self._queue.get()
            ticket._started.set()
            if self._poisoned is not None:
                ticket._error = self._poisoned
            else:
                try:
                    mx.async_eval(*arrays)
                except BaseException as e:  # raised where the round is read, or by raise_failure
                    ticket._error = self._poisoned = e
            ticket._done.set()
            del arrays, ticket  # a failed launch's graph must not stay pinned here

    def launch(self, arrays: list) -> Ticket:
        ticket = self._enqueue(arrays)
        # Wait for the launcher thread to take it: it needs the GIL to, and an engine thread
        # going straight on with Python would hold the GIL for up to the switch interval (5 ms)
        # first. Inside `mx.async_eval` it releases the GIL again; it takes it back to set
        # `_done`, by when this thread waits for that (it releases the GIL there too).
        t0 = time.perf_counter()
        ticket._started.wait()
        ticket.handoff_s = time.perf_counter() - t0
        return ticket

    def queue_behind(self, arrays: list) -> None:
        """Queue a launch nobody reads (`evaluate_behind`), without waiting for the thread to
        take it: the next launch's hand-off or a settle waits for it anyway."""
        self._enqueue(arrays)

    def _enqueue(self, arrays: list) -> Ticket:
        self.raise_failure()  # nothing is handed over after a failed launch
        ticket = self._last = Ticket()
        self._queue.put((arrays, ticket))
        return ticket

    def raise_failure(self) -> None:
        """Raise the error of a launch that failed, if one has: nothing built on its arrays may
        be handed over (and a `queue_behind` launch has no reader to raise it)."""
        if (error := self.take_failure()) is not None:
            raise error

    def take_failure(self) -> BaseException | None:
        """The error of a launch that failed, if one has; taking it ends the poisoning once
        every launch queued after it has failed with it (only this thread queues, so none is
        queued meanwhile)."""
        if self._poisoned is None:
            return None
        self.idle()
        error, self._poisoned = self._poisoned, None
        return error

    def idle(self) -> None:
        """Wait until every launch so far is scheduled. A failure raises where its round is
        read (`Ticket.read`), at the next hand-off, or at `Engine.settle()` (which calls
        `raise_failure` after this): another engine's wait is no place for it. On the launcher
        thread itself (code that `mx.async_eval` calls while it launches, e.g. a benchmark's
        wrapper walking the graph) it returns at once: that thread runs one launch at a time, so
        none but the one it is in is running, and waiting for that, or for launches queued
        behind it, would never end."""
        if threading.current_thread() is self._thread:
            return
        self._last._done.wait()

    def adopt(self) -> None:
        """Make this stream the calling thread's default from now on: every op the thread
        creates (an engine's, and whatever it makes between steps) can then run in either
        thread, where an op of the thread's own stream could run only there."""
        if mx.default_stream(self.stream.device) != self.stream:
            mx.set_default_stream(self.stream)

    @contextlib.contextmanager
    def routing(self) -> Iterator[None]:
        """Launches inside go through the launcher thread."""
        outer = getattr(_local, "launcher", None)
        _local.launcher = self
        try:
            yield
        finally:
            _local.launcher = outer


ENV = "SPECFLEET_LAUNCH_THREAD"  # "1" / "0": launch from a thread of its own or not


# Rows a pipelined round needs before it launches from the launcher thread: every round. Stop
# 32 set 8 (the trained Qwen3.5-shape hybrid's plain rounds ran 0.77-1.06x at B=1-4 then, two
# thread hand-offs against a ~2.5 ms round). On stop 55's tree every round from the thread won
# on an H200, in turns in one process (bench/results/s55/README.md): the random Qwen3.5-shape
# hybrid's plain and adaptive-MTP rounds 1.38-1.42x at B=1 and 4; random Qwen3 0.87B / 6.6B
# plain 1.12 / 1.29x at B=1 and 1.34 / 1.47x at B=4, the always-right drafter's rounds
# 1.21-1.41x. Rounds of 8+ rows launched there already. Metal was not re-measured: it follows
# the GPU rule, as it did at 8.
ROWS_MIN = 1


def rows_min(backend: Backend) -> int | None:
    """The fewest rows a round launches from a launcher thread with (ROWS_MIN); None: never.
    The environment's "1" / "0" decides on any backend, else a launcher runs where a launch is
    host work apart from the compute (a GPU; not MLX's CPU backend, where it did not pay)."""
    if not backend.wants(ENV, default=not backend.computes_in_launch):
        return None
    return ROWS_MIN


_launchers: dict[str, Launcher] = {}
_launchers_lock = threading.Lock()


def process_launcher() -> Launcher:
    """The process's launcher for the default device: one stream and one thread for every
    engine, so an engine's arrays stay on one stream wherever it is built and stepped. Engines
    that launch this way are stepped from one thread at a time (a worker's engine loop): two
    threads stepping such engines at once could evaluate on the stream together."""
    device = mx.default_device()
    with _launchers_lock:
        if str(device) not in _launchers:
            _launchers[str(device)] = Launcher(device)
        return _launchers[str(device)]


def materialize(*owners: Any) -> None:
    """Evaluate, on the caller's stream, the arrays these objects hold: a model's parameters and
    the arrays its modules keep as plain attributes (a RoPE table), and a drafter's models and
    state, a few attributes deep. One left lazy (an fp32 upcast, a table) belongs to the
    caller's stream, which no other thread can run. A module's dicts and lists of arrays are
    not walked: they hold views made in compile traces (workers/row_linear.py `held_view`),
    whose inputs exist only in the trace."""
    found: list[Any] = []
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if isinstance(obj, mx.array):
            found.append(obj)
        elif id(obj) in seen or depth <= 0 or isinstance(obj, type):
            return
        elif isinstance(obj, nn.Module):
            seen.add(id(obj))
            found.append(obj.parameters())
            for m in obj.modules():
                found.extend(v for v in vars(m).values() if isinstance(v, mx.array))
        else:
            seen.add(id(obj))
            items = list(obj) if isinstance(obj, list | tuple) else []
            items += list(obj.values()) if isinstance(obj, dict) else []
            items += list(vars(obj).values()) if hasattr(obj, "__dict__") else []
            for item in items:
                walk(item, depth - 1)

    for owner in owners:
        walk(owner, 4)
    mx.eval(found)


def routed() -> bool:
    """Whether this thread's step launches through a launcher now."""
    return getattr(_local, "launcher", None) is not None


def idle() -> None:
    """Wait until every launcher's launches so far are scheduled (before walking a graph that
    may share arrays with one: mx.export_to_dot, a second evaluation)."""
    with _launchers_lock:
        launchers = list(_launchers.values())
    for launcher in launchers:
        launcher.idle()


def async_eval(*arrays: Any) -> Ticket | None:
    """mx.async_eval: through the routing launcher (its ticket returned), else at once."""
    launcher: Launcher | None = getattr(_local, "launcher", None)
    if launcher is None:
        mx.async_eval(*arrays)
        return None
    return launcher.launch(list(arrays))


def evaluate_behind(*arrays: Any) -> None:
    """mx.async_eval of arrays nobody reads back, launched only so that their graph is freed
    (a prefill chunk, prefix-cache copies, an MTP head chunk): through the routing launcher
    without waiting for it (`Launcher.queue_behind`), else at once. Lists may be empty."""
    if not any(len(a) if isinstance(a, list | tuple) else 1 for a in arrays):
        return
    launcher: Launcher | None = getattr(_local, "launcher", None)
    if launcher is None:
        mx.async_eval(*arrays)
    else:
        launcher.queue_behind(list(arrays))
