"""`specfleet convert` then `specfleet worker --model OUT_DIR`, both as real subprocesses: the
worker serves the converted GGUF over gRPC with a converted, quantized draft model, and answers
as Engine.load of the same directory does in this process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from gguf import GGMLQuantizationType as QT
from grpc_health.v1 import health_pb2

from tests.tiny import perturbed
from tests.workers.convert.gguf_files import hf_tokenizer, tiny_family_model, write_gguf
from workers import Engine
from workers.service.grpc_client import WorkerClient
from workers.types import SamplingParams

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _specfleet(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", *args],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_worker_serves_a_converted_gguf_with_a_quantized_draft(tmp_path: Path) -> None:
    tok = hf_tokenizer("qwen2")
    target = tiny_family_model("qwen2")
    write_gguf(tmp_path / "t.gguf", target, "qwen2", QT.Q8_0, tok, "qwen2")
    write_gguf(tmp_path / "d.gguf", perturbed(target, 0.3), "qwen2", QT.Q4_1, tok, "qwen2")
    for src, out in (("t.gguf", "qwen2-tiny"), ("d.gguf", "draft")):
        proc = _specfleet("convert", str(tmp_path / src), str(tmp_path / out))
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert "kept" in stdout
    model_dir, draft = tmp_path / "qwen2-tiny", f"model:{tmp_path / 'draft'}"
    proc = _specfleet(
        "worker", "--model", str(model_dir), "--drafter", draft, "--draft-depth", "3",
        "--max-batch-size", "4", "--port", "0", "--metrics-port", "0",
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        m = re.match(r"specfleet worker (\S+) grpc=(\S+) metrics=(\S+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        with WorkerClient(m.group(2)) as client:
            deadline = time.monotonic() + 60
            while client.health() != health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            prompts = {f"r{i}": tok.encode(t).ids for i, t in enumerate(["def add(a, b):", "It's"])}
            got = client.generate(prompts, SamplingParams(max_tokens=10))
            reference = Engine.load(model_dir, drafter=draft, draft_depth=3, max_batch_size=4)
            want = reference.generate(list(prompts.values()), SamplingParams(max_tokens=10))
            assert [got[k].tokens for k in prompts] == [w.tokens for w in want]
            assert client.info().engine.model_id == "qwen2-tiny"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
