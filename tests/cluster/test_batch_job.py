"""Offline batch job: format, error file, resume after SIGKILL, torn last line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.batch_job import BatchJobConfig, recover_partial, run_batch
from tests.cluster.batch_runner import fake_backend

ROOT = Path(__file__).resolve().parents[2]


def write_input(path: Path, n: int, *, bad_lines: bool = True) -> list[str]:
    ids = []
    with open(path, "w") as f:
        for i in range(n):
            cid = f"req-{i:04d}"
            ids.append(cid)
            if i % 7 == 3:
                body = {
                    "messages": [{"role": "user", "content": f"chat {i} hello"}],
                    "max_tokens": 5,
                }
                url = "/v1/chat/completions"
            else:
                body = {"prompt": f"prompt number {i}", "max_tokens": 8, "temperature": 0}
                url = "/v1/completions"
            f.write(
                json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body}) + "\n"
            )
            if bad_lines and i == n // 3:
                f.write("{this is not json\n")
                f.write(json.dumps({"method": "POST", "body": {"prompt": "x"}}) + "\n")
                f.write(json.dumps({"custom_id": "req-0000", "body": {"prompt": "dup"}}) + "\n")
    return ids


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_output(out: Path, ids: list[str]) -> list[dict]:
    rows = read_jsonl(out)
    got = [r["custom_id"] for r in rows]
    assert sorted(got) == sorted(ids), "every custom_id exactly once"
    assert len(got) == len(set(got))
    by_id = {r["custom_id"]: r for r in rows}
    for cid in ids:
        r = by_id[cid]
        assert r["response"]["status_code"] == 200, r
        body = r["response"]["body"]
        i = int(cid.split("-")[1])
        if i % 7 == 3:
            assert body["object"] == "chat.completion"
            assert body["choices"][0]["message"]["content"] == f"chat {i} hello"[::-1][:5]
        else:
            assert body["choices"][0]["text"] == f"prompt number {i}"[::-1][:8]
        assert body["usage"]["completion_tokens"] == len(body["specfleet"]["token_ids"])
    return rows


def test_in_process_run_with_errors(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = write_input(inp, 30)
    with open(inp, "a") as f:
        f.write(json.dumps({"custom_id": "fails", "body": {"prompt": "FAIL please"}}) + "\n")
        f.write(json.dumps({"custom_id": "rejected", "body": {"prompt": "REJECT"}}) + "\n")
        f.write(json.dumps({"custom_id": "badparams", "body": {"prompt": "x", "top_p": 7}}) + "\n")
        f.write(json.dumps({"custom_id": "badurl", "url": "/v1/embeddings", "body": {}}) + "\n")
    summary = run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    rows = read_jsonl(out)
    by_id = {r["custom_id"]: r for r in rows}
    assert sorted(by_id) == sorted(ids + ["fails", "rejected", "badparams", "badurl"])
    assert by_id["fails"]["response"]["status_code"] == 500
    assert "backend failed on fails" in by_id["fails"]["error"]["message"]
    assert by_id["rejected"]["response"]["status_code"] == 400
    assert "top_p=7" in by_id["badparams"]["error"]["message"]
    assert "/v1/embeddings" in by_id["badurl"]["error"]["message"]
    check_output_rows = [r for r in rows if r["custom_id"] in ids]
    assert all(r["response"]["status_code"] == 200 for r in check_output_rows)
    errors = read_jsonl(tmp_path / "out.errors.jsonl")
    msgs = " | ".join(e["error"]["message"] for e in errors)
    assert "not valid JSON" in msgs and "custom_id" in msgs and "duplicate custom_id" in msgs
    assert {e["custom_id"] for e in errors} >= {"fails", "rejected", "badparams", "badurl"}
    assert summary.num_malformed == 3 and summary.num_failed == 4
    assert summary.num_succeeded == 30
    assert summary.acceptance_rate == pytest.approx(0.75)
    assert "30 ok" in summary.render()
    # Re-running a finished job serves only its failed requests again (they fail again here)
    # and leaves each custom_id and each failure in the files once.
    again = run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    assert again.num_resumed == 30 and again.num_succeeded == 0 and again.num_failed == 4
    assert len(read_jsonl(out)) == 34 and len(read_jsonl(tmp_path / "out.errors.jsonl")) == 7
    kept = run_batch(BatchJobConfig(inp, out, progress=False, retry_failed=False), fake_backend)
    assert kept.num_resumed == 34 and kept.num_failed == 0


def test_recover_partial_cuts_torn_line(tmp_path: Path) -> None:
    p = tmp_path / "x.partial"
    p.write_bytes(b'{"custom_id": "a"}\n{"custom_id": "b"}\n{"custom_id": "c", "resp')
    assert recover_partial(p, "custom_id") == {"a", "b"}
    assert p.read_bytes() == b'{"custom_id": "a"}\n{"custom_id": "b"}\n'
    p.write_bytes(b'{"custom_id": "a"}\n{"custom_id": \n')  # newline but damaged
    assert recover_partial(p, "custom_id") == {"a"}


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="concurrency=0"):
        BatchJobConfig(tmp_path / "a", tmp_path / "b", concurrency=0)
    with pytest.raises(ValueError, match="overwrite the input"):
        BatchJobConfig(tmp_path / "a", tmp_path / "a")


def test_kill_halfway_and_resume(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    n = 120
    ids = write_input(inp, n)
    partial = tmp_path / "out.jsonl.partial"
    cmd = [sys.executable, str(ROOT / "tests/cluster/batch_runner.py"), str(inp), str(out), "0.02"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if partial.exists() and partial.read_bytes().count(b"\n") >= n // 2:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists(), "killed job must not publish a final output"
    first = partial.read_bytes().count(b"\n")
    assert n // 2 <= first < n
    with open(partial, "ab") as f:  # a torn line, as a kill during a write leaves it
        f.write(b'{"id": "batch_req_x", "custom_id": "req-00')
    res = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"{first} resumed" in res.stderr and "120/123" not in res.stderr
    assert "/120" in res.stderr  # the progress bar drew
    check_output(out, ids)
    assert not partial.exists()
    errors = read_jsonl(tmp_path / "out.errors.jsonl")
    assert len(errors) == 3, "malformed lines recorded exactly once across the two runs"
