"""A real `specfleet up --http-port 0` fleet in a subprocess (local Ray, tiny checkpoints),
with the addresses it prints parsed back: shared by the HTTP and lean-client tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.tiny_ckpt import write_tiny_checkpoints

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "http-secret"


class UpFleet:
    def __init__(self, tmp: Path, workers: int = 1, start_timeout_s: float = 240.0) -> None:
        self.target, self.draft = write_tiny_checkpoints(tmp)
        self.log = tmp / "up.err"
        cmd = [
            sys.executable, "-m", "cluster.cli", "up", "--workers", str(workers),
            "--model", str(self.target), "--drafter", f"model:{self.draft}", "--draft-depth", "3",
            "--gateway-port", "0", "--http-port", "0",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECFLEET_AUTH_TOKEN": TOKEN}
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
            )
        end = time.monotonic() + start_timeout_s
        while "serving; Ctrl-C to stop" not in self.stderr():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"specfleet up did not start:\n{self.stderr()[-3000:]}")
            time.sleep(0.2)
        text = self.stderr()
        self.gateway = _find(r"^gateway:\s+(\S+)$", text)
        self.base_url = _find(r"^http \(OpenAI/Anthropic\): (\S+)$", text)  # .../v1
        self.http = self.base_url.removesuffix("/v1")
        self.worker_metrics = re.findall(r"metrics (http://\S+/metrics)$", text, re.M)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def worker_counter(self, name: str, **labels: str) -> float:
        """Sum of a worker metric over the fleet's workers (samples matching `labels`)."""
        total = 0.0
        for url in self.worker_metrics:
            for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
                if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def raw(
        self, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A plain HTTP call (no SDK): (status, JSON body)."""
        hdrs = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        req = urllib.request.Request(
            self.http + path, data=body, headers={**hdrs, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


def _find(pattern: str, text: str) -> str:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise RuntimeError(f"{pattern!r} not in specfleet up's output:\n{text[-3000:]}")
    return m.group(1)
