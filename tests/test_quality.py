"""Code quality gates run with the tests (and so in CI): ruff lint, ruff format, mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["contract", "cluster", "workers", "bench", "tests", "train", "protos"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint_is_clean():
    res = run("ruff", "check", *PATHS)
    assert res.returncode == 0, res.stdout[-4000:]


def test_ruff_format_is_clean():
    res = run("ruff", "format", "--check", *PATHS)
    assert res.returncode == 0, res.stdout[-4000:]


@pytest.mark.timeout(900)
def test_mypy_cluster_and_workers():
    res = run("mypy", "contract", "protos", "cluster", "workers")
    assert res.returncode == 0, res.stdout[-4000:]
