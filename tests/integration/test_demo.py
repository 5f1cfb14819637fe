"""The README's main job, shortened: `specfleet demo --limit 6` on the embedded default model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_demo_runs_baseline_and_mtp_and_prints_the_summary(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "cluster.cli", "demo", "--limit", "6", "--out-dir", str(tmp_path),
           "--stream-prompts", "2"]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=560)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    for field in ("requests:          6 (0 failed)", "acceptance rate:", "tokens/s:",
                  "speedup (batch job):", "speedup (single stream):"):  # fmt: skip
        assert field in out, out
    # The single stream decodes alone with and without the drafter: greedy, so identical.
    assert "outputs identical 2/2" in out, out
    assert "scheduler metrics: http://" in res.stderr and "metrics http://" in res.stderr
    heldout = (ROOT / "workers/default_model/heldout_prompts.jsonl").read_text().splitlines()
    want = [json.loads(x)["custom_id"] for x in heldout[:6]]
    for name in ("results", "baseline"):
        rows = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert sorted(r["custom_id"] for r in rows) == sorted(want)
        assert all(r["response"]["status_code"] == 200 for r in rows)
    # Greedy: the MTP run and the no-drafter run wrote the same completions.
    texts = {
        name: {
            r["custom_id"]: r["response"]["body"]["choices"][0]["text"]
            for r in map(json.loads, (tmp_path / f"{name}.jsonl").read_text().splitlines())
        }
        for name in ("results", "baseline")
    }
    assert texts["results"] == texts["baseline"]
