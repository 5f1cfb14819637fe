"""What the launcher-thread tests share (test_launch.py, test_launch_joins.py): every round
forced onto the thread and counted, a launch held on it, and a count of an engine's settles."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest

from workers import Engine, launch


@pytest.fixture(autouse=True)
def launched(monkeypatch, request):
    """Every round from the launcher thread; counts the rounds handed to it. A test named in
    its module's NOT_COUNTED may launch none; every other must have launched one."""
    monkeypatch.setenv(launch.ENV, "1")
    seen: list[int] = []
    real = launch.Launcher.launch

    def counted(self, arrays):
        seen.append(len(arrays))
        return real(self, arrays)

    monkeypatch.setattr(launch.Launcher, "launch", counted)
    yield seen
    if request.node.originalname not in getattr(request.module, "NOT_COUNTED", set()):
        assert seen, "no round was launched from the launcher thread"


def hold_launches(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """From now on the launcher thread holds its next launch until `release` is set; `held`
    is set once it does. Returns (held, release)."""
    held, release = threading.Event(), threading.Event()
    real = mx.async_eval

    def held_in_launcher(*arrays):
        if threading.current_thread().name == "specfleet-launcher" and not release.is_set():
            held.set()
            release.wait(10)
        return real(*arrays)

    monkeypatch.setattr(mx, "async_eval", held_in_launcher)
    return held, release


def counted_settles(engine: Engine) -> list[int]:
    """A list that grows by one at each `engine.settle()` (which still runs)."""
    settles: list[int] = []
    real = engine.settle
    engine.settle = lambda: (settles.append(1), real())[1]  # type: ignore[method-assign]
    return settles
