"""A plain-stderr progress bar (no dependency): a redrawn line on a terminal, periodic lines
otherwise (so CI logs stay readable)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO


class Progress:
    def __init__(
        self,
        total: int,
        initial: int = 0,
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        width: int = 30,
        status: Callable[[], str] | None = None,
    ) -> None:
        self.total, self.done, self.failed = total, initial, 0
        self.initial = initial
        self.tokens = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.status = status  # e.g. fleet utilisation, appended to each line
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self._draw(force=True)

    def update(self, n: int = 1, *, tokens: int | None = None, failed: bool = False) -> None:
        with self._lock:
            self.done += n
            self.failed += int(failed)
            if tokens is not None:
                self.tokens = tokens
            self._draw(force=self.done >= self.total)

    def line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = (self.done - self.initial) / elapsed
        bar = "#" * filled + "." * (self.width - filled)
        fail = f" {self.failed} failed" if self.failed else ""
        extra = f" | {self.status()}" if self.status is not None else ""
        return (
            f"[{bar}] {self.done}/{self.total} {frac:6.1%} {rate:6.1f} req/s "
            f"{self.tokens / elapsed:7.1f} tok/s{fail}{extra}"
        )

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        interval = 0.2 if self.tty else 5.0
        if not force and now - self._last_draw < interval:
            return
        self._last_draw = now
        if self.tty:
            self.stream.write("\r" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
