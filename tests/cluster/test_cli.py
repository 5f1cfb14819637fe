"""`specfleet` entry point: subcommands parse, `worker` delegates to the worker CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cluster.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_parser_subcommands() -> None:
    p = build_parser()
    a = p.parse_args(["up", "--workers", "3", "--batch", "in.jsonl", "-o", "out.jsonl"])
    assert a.command == "up" and a.workers == 3 and a.batch == "in.jsonl"
    b = p.parse_args(["batch", "in.jsonl", "-o", "out.jsonl", "--gateway", "h:1"])
    assert b.command == "batch" and b.gateway == "h:1" and b.concurrency is None  # fleet-sized


def test_worker_delegates_to_worker_cli() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "worker", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "--model" in res.stdout and "--port" in res.stdout


def test_batch_against_missing_gateway_fails_per_request(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"custom_id": "a", "body": {"prompt": [1, 2]}}\n')
    out = tmp_path / "out.jsonl"
    rc = main(
        [
            "batch",
            str(inp),
            "-o",
            str(out),
            "--gateway",
            "127.0.0.1:1",
            "--no-progress",
            "--retry-timeout-s",
            "0.3",
            "--max-retries",
            "1",
        ]
    )
    assert rc == 0
    row = out.read_text()
    assert '"status_code": 500' in row and "UNAVAILABLE" in row
