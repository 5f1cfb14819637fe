"""The test helper that retries Ray's own startup timeout retries that and nothing else."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
from tests.ray_startup import start_ray  # noqa: E402

TIMEOUT = Exception("The current node timed out during startup. This could happen ...")


def test_retries_rays_startup_timeout_once() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise TIMEOUT
        return "up"

    assert start_ray(start) == "up" and len(calls) == 2


def test_a_second_timeout_fails() -> None:
    calls: list[int] = []

    def start() -> None:
        calls.append(1)
        raise TIMEOUT

    with pytest.raises(Exception, match="timed out during startup"):
        start_ray(start)
    assert len(calls) == 2


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def start() -> None:
        calls.append(1)
        raise ValueError("bad resources")

    with pytest.raises(ValueError, match="bad resources"):
        start_ray(start)
    assert calls == [1]


def test_a_retry_kills_what_the_failed_attempt_started_and_nothing_else() -> None:
    """Processes named as Ray's (here `sleep` run as `raylet`) that the failed attempt started
    are killed before the retry; one that was running before it (a cluster's node) is not."""
    import subprocess
    import time
    from pathlib import Path

    def ray_like() -> subprocess.Popen:
        """A `raylet`-named process, returned once its exec is done. Before the exec its
        cmdline is pytest's, then bash's (`bash -c "exec -a raylet ..."`, which already holds
        the word), and inside the exec it reads empty for a moment; a look in either window
        would miss it (stop 61's and stop 64's CI killed the bystander that way). Only after
        the exec does argv[0] read `raylet`."""
        p = subprocess.Popen(["bash", "-c", "exec -a raylet sleep 60"])
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"raylet\0"):
            assert time.monotonic() < deadline, "the ray-like process never started"
            time.sleep(0.01)
        return p

    before = ray_like()
    started: list[subprocess.Popen] = []

    def start() -> str:
        started.append(ray_like())
        if len(started) == 1:
            raise TIMEOUT
        return "up"

    try:
        assert start_ray(start) == "up"
        assert started[0].wait(timeout=10) == -9  # SIGKILL
        assert started[1].poll() is None and before.poll() is None
    finally:
        for p in (before, *started):
            p.kill()
            p.wait()
