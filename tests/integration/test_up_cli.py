"""`specfleet up --batch`: the README's main command, end to end in a subprocess (its own local
Ray with two workers, scheduler, gateway, the offline job through the client, summary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.tiny_ckpt import write_tiny_checkpoints
from workers.types import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(400)


def test_up_runs_batch_and_prints_summary(tmp_path: Path) -> None:
    target, draft = write_tiny_checkpoints(tmp_path)
    prompts = [[(7 * i + j) % 200 + 1 for j in range(1 + i % 23)] for i in range(40)]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    with open(inp, "w") as f:
        for i, p in enumerate(prompts):
            body = (
                {"prompt": p, "max_tokens": 6}
                if i % 2
                else {"prompt": p, "max_tokens": 6, "temperature": 0}
            )
            f.write(
                json.dumps(
                    {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}
                )
                + "\n"
            )
        f.write(
            json.dumps(
                {
                    "custom_id": "chat",
                    "body": {"messages": [{"role": "user", "content": "the fox"}], "max_tokens": 4},
                }
            )
            + "\n"
        )
    cmd = [
        sys.executable,
        "-m",
        "cluster.cli",
        "up",
        "--workers",
        "2",
        "--model",
        str(target),
        "--drafter",
        f"model:{draft}",
        "--draft-depth",
        "3",
        "--fixed-depth",  # the tiny draft is the target's size: adaptive depth may not draft
        "--gateway-port",
        "0",
        "--prometheus-targets-dir",
        str(tmp_path / "targets"),
        "--batch",
        str(inp),
        "-o",
        str(out),
        "--summary-json",
        str(tmp_path / "summary.json"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=360)
    assert res.returncode == 0, res.stderr[-3000:]
    err = res.stderr
    assert "gateway:" in err and "scheduler metrics: http://" in err and "worker worker-1" in err
    # The scheduler actor's constructor takes worker names, not handles: Ray logs an error for
    # an actor restarted from object refs it may have lost (ray-project/ray#53727).
    assert "constructor arguments in the object store" not in err, err[-3000:]
    assert "41 ok" in err and "acceptance:" in err and "/41" in err
    rows = {r["custom_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(rows) == 41
    from workers import Engine

    ref = Engine.load(str(target), drafter=f"model:{draft}", draft_depth=3)
    want = ref.generate(prompts, SamplingParams(max_tokens=6))
    for i, w in enumerate(want):
        assert rows[f"r{i}"]["response"]["body"]["specfleet"]["token_ids"] == w.tokens
    chat = rows["chat"]["response"]["body"]
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] >= 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_succeeded"] == 41 and summary["num_draft_tokens"] > 0
    assert 0 < summary["acceptance_rate"] <= 1
    # Fleet-wide acceptance length from the workers' metrics, consistent with per-request counts.
    assert summary["fleet_num_accepted_tokens"] == summary["num_accepted_tokens"]
    assert 1.0 < summary["mean_acceptance_length"] <= 4.0  # draft depth 3
    assert "acc. length:" in err
    targets = json.loads((tmp_path / "targets" / "workers.json").read_text())
    assert len(targets) == 2
