"""`python -m workers.service` as a real subprocess: serves, drains on SIGTERM, rejects bad flags."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpc_health.v1 import health_pb2

from tests.workers.service.real_engine import make_engine
from workers.service.grpc_client import WorkerClient
from workers.types import SamplingParams

ROOT = Path(__file__).resolve().parents[3]


def _spawn(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "workers.service", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def test_cli_serves_and_drains_on_sigterm(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    proc = _spawn(
        "--engine-factory", "tests.workers.service.real_engine:make_engine",
        "--port", "0", "--metrics-port", "0", "--auth-token-file", str(token_file),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        m = re.match(r"specfleet worker (\S+) grpc=(\S+) metrics=(\S+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        with WorkerClient(m.group(2), token="tok") as client:
            deadline = time.monotonic() + 60
            while client.health() != health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            prompt = [5, 9, 200, 17]
            got = client.generate({"a": prompt}, SamplingParams(max_tokens=12))["a"].tokens
            assert got == make_engine().generate([prompt], SamplingParams(max_tokens=12))[0].tokens
            assert client.info().engine.model_id == "tiny-llama"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_rejects_half_tls_config() -> None:
    proc = _spawn("--tls-cert", "x.pem", "--port", "0", "--metrics-port", "-1")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--tls-key" in err
