"""Import rules of the worker service: transport imports only in transport-named files, and
the client-side modules (codec, client) load without mlx so the cluster can use them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TRANSPORT_NAME = re.compile(r"server|actor|service|transport|codec|grpc|rpc")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_transport_named_files_import_grpc_or_ray() -> None:
    files = sorted((ROOT / "workers" / "service").glob("*.py"))
    assert files
    for path in files:
        uses = _imports(path) & {"grpc", "grpc_health", "grpc_reflection", "ray"}
        if uses:
            assert TRANSPORT_NAME.search(path.stem), f"{path.name} imports {uses}; rename it"
    assert not _imports(ROOT / "workers" / "service" / "metrics.py") & {"grpc", "ray"}
    assert "ray" not in _imports(ROOT / "workers" / "service" / "grpc_server.py")
    ray_users = [p.name for p in (ROOT / "workers").rglob("*.py") if "ray" in _imports(p)]
    assert ray_users == ["ray_actor.py"]


def test_client_side_modules_import_without_mlx() -> None:
    code = (
        "import sys\n"
        "import workers.service, protos.worker_codec, workers.service.grpc_client\n"
        "import protos.specfleet.v1.worker_pb2_grpc\n"
        "bad = sorted(m for m in sys.modules if m == 'mlx' or m.startswith(('mlx.', 'mlx_lm')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
