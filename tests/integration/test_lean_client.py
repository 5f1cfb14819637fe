"""The lean install: `pip install specfleet` (base dependencies only) is enough for the client.

pyproject's base dependencies must be exactly what `from cluster import Client` needs; a
subprocess with every package of the extras blocked from importing then imports the client
and runs requests against a real `specfleet up` fleet."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from cluster import Client
from tests.integration.http_fleet import ROOT, TOKEN, UpFleet

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
BASE = {"msgpack", "grpcio", "protobuf"}
# Distribution name -> top-level import name, where they differ.
IMPORT_NAME = {
    "mlx-lm": "mlx_lm",
    "grpcio-health-checking": "grpc_health",
    "grpcio-reflection": "grpc_reflection",
    "prometheus-client": "prometheus_client",
}
# Pulled in by the extras' own dependencies (mlx-lm, ray), never by the client.
TRANSITIVE = ["transformers", "grpc_tools", "pydantic", "yaml", "anyio", "httpx2"]

BLOCKED_RUN = """
import json, sys
blocked = set(sys.argv[1].split(","))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not a base dependency")
        return None

sys.meta_path.insert(0, Blocker())
from cluster import Client

with Client(sys.argv[2], token=sys.argv[3]) as c:
    out = c.generate("the lazy dog", max_tokens=6)
    streamed = [d.text for d in c.stream([{"role": "user", "content": "hi"}], max_tokens=5)]
    info = c.cluster_info()
print(json.dumps({"tokens": out.tokens, "text": "".join(streamed),
                  "workers": len(info.workers),
                  "loaded": sorted({m.split(".")[0] for m in sys.modules} & blocked)}))
"""


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=;!~]", r, maxsplit=1)[0].lower() for r in reqs}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_base_dependencies_are_the_clients() -> None:
    project = _pyproject()
    assert _names(project["dependencies"]) == BASE
    extras = project["optional-dependencies"]
    assert {"worker", "cluster", "all"} <= set(extras)
    assert "specfleet[worker,cluster]" in extras["all"]
    assert {"mlx-lm", "mlx"} <= _names(extras["worker"])
    assert {"ray", "tokenizers", "jinja2", "starlette", "uvicorn"} <= _names(extras["cluster"])


def test_client_runs_with_only_base_dependencies(up_fleet: UpFleet) -> None:
    extras = _pyproject()["optional-dependencies"]
    heavy = _names(extras["worker"]) | _names(extras["cluster"])
    blocked = sorted({IMPORT_NAME.get(n, n) for n in heavy} | set(TRANSITIVE) | {"numpy"})
    assert "mlx" in blocked and "ray" in blocked and "tokenizers" in blocked
    res = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, ",".join(blocked), up_fleet.gateway, TOKEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and got["workers"] == 1 and got["text"]
    with Client(up_fleet.gateway, token=TOKEN) as c:  # the full install's client agrees
        assert got["tokens"] == c.generate("the lazy dog", max_tokens=6).tokens


def test_blocker_really_blocks(up_fleet: UpFleet) -> None:
    """The check above can fail: a client that needed a blocked package would not import."""
    res = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, "grpc", up_fleet.gateway, TOKEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "grpc is not a base dependency" in res.stderr
