"""Start a local Ray runtime in a test, retrying Ray's own startup once.

Ray waits a fixed 30 s for a fresh raylet to register with its GCS (ray/_private/node.py:
`raylet_start_wait_time_s = 30`, no setting). On a loaded 2-core CI machine that wait was
missed once (stop 57: "The current node timed out during startup ... Failed to get node info
b'RPC error: Deadline Exceeded'"), before any specfleet code ran. That is Ray's startup, not
the code under test, so it is retried once after the processes that attempt started are stopped; any
other error, and a second timeout, fail the test as before.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
STARTUP_TIMEOUT = "timed out during startup"
RAY_PROCESS_MARKERS = ("gcs_server", "raylet", "ray/dashboard", "ray/_private", "ray::")


def _ray_children() -> list[int]:
    """Pids of this process's Ray children (Linux /proc; none found elsewhere)."""
    me = str(os.getpid())
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue  # it ended while we looked
        if ppid == me and any(m in cmd for m in RAY_PROCESS_MARKERS):
            pids.append(int(proc.name))
    return pids


def start_ray(start: Callable[[], T], attempts: int = 2) -> T:
    """Run `start` (a `ray.init(...)` or `Cluster(...)` call); on Ray's startup timeout, stop
    what it left and run it again, up to `attempts` times in all."""
    import ray

    for attempt in range(1, attempts + 1):
        before = set(_ray_children())  # a cluster's running nodes are not this attempt's
        try:
            return start()
        except Exception as e:
            if STARTUP_TIMEOUT not in str(e) or attempt == attempts:
                raise
            print(f"ray startup timed out (attempt {attempt}); retrying", file=sys.stderr)
            ray.shutdown()
            for pid in set(_ray_children()) - before:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    raise AssertionError("unreachable")
