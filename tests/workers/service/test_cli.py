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

from workers import Engine
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


def _save_tiny_model(path: Path) -> Path:
    """A tiny random llama + byte-level tokenizer saved as an mlx-lm model directory."""
    from mlx_lm.utils import save_config, save_model

    from tests.tiny import make_tiny_tokenizer, tiny_model

    model = tiny_model("llama", seed=0)
    save_model(path, model)
    save_config({k: v for k, v in vars(model.args).items() if v is not None}, path / "config.json")
    make_tiny_tokenizer()._tokenizer.save_pretrained(str(path))
    return path


def test_cli_serves_and_drains_on_sigterm(tmp_path: Path) -> None:
    model_dir = _save_tiny_model(tmp_path / "tiny-llama")
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    proc = _spawn(
        "--model", str(model_dir), "--drafter", "ngram", "--max-batch-size", "4",
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
            reference = Engine.load(model_dir, drafter="ngram", max_batch_size=4)
            assert got == reference.generate([prompt], SamplingParams(max_tokens=12))[0].tokens
            assert client.info().engine.drafter == "ngram"
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
