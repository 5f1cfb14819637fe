"""The import order of specfleet's layers (README.md "How it works", **Layers**), enforced on the
source:

    contract        plain types, limits, status codes, worker states, acceptance modes
       ^
    protos          the wire: generated stubs, one codec per wire, auth/TLS, health
       ^
    workers (engine, worker service) | cluster (scheduler, gateway) | client
       ^
    cli             cluster/cli.py, workers/service/cli.py (and the launchers beside them)

Each layer imports only from layers below it (and itself); the three in the middle do not
import each other, except the launchers, which start workers from the cluster.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"contract", "protos", "workers", "cluster"}
CLIS = {"cluster/cli.py", "workers/service/cli.py", "workers/service/__main__.py"}
# Start worker processes (Ray actors) for a cluster: the only cluster -> workers edges.
LAUNCHERS = {"cluster/ray_actor.py", "cluster/demo.py", *CLIS}
CLIENT = "cluster/client.py"


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Dotted module names `path` imports (function-level imports too, unless told)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def ours(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names} & OURS


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("contract", {"contract"}),
        ("protos", {"contract", "protos"}),
        ("workers", {"contract", "protos", "workers"}),
    ],
)
def test_layers_import_only_below(package: str, allowed: set[str]) -> None:
    bad = {rel(p): ours(imports(p)) - allowed for p in files(package)}
    assert {k: v for k, v in bad.items() if v} == {}


def test_contract_is_plain_data() -> None:
    for path in files("contract"):
        heavy = {n.split(".")[0] for n in imports(path)} & {"grpc", "mlx", "ray", "numpy"}
        assert not heavy, f"{rel(path)} imports {heavy}"


def test_wire_codecs_import_no_transport() -> None:
    for name in (
        "worker_codec.py",
        "gateway_codec.py",
        "packing.py",
        "strict_pb.py",
        "msgpack_fields.py",
    ):
        mods = {n.split(".")[0] for n in imports(ROOT / "protos" / name)}
        assert not mods & {"grpc", "mlx", "ray"}, name


def test_engine_imports_no_wire() -> None:
    engine = [p for p in files("workers") if "service" not in p.parts]
    for path in engine:
        mods = {n.split(".")[0] for n in imports(path)}
        assert not mods & {"protos", "grpc", "ray", "cluster"}, rel(path)


def test_cluster_imports_workers_only_to_launch_them() -> None:
    for path in files("cluster"):
        if rel(path) in LAUNCHERS:
            continue
        assert "workers" not in ours(imports(path)), rel(path)
        assert "mlx" not in {n.split(".")[0] for n in imports(path)}, rel(path)


def test_client_stands_on_contract_and_wire() -> None:
    assert ours(imports(ROOT / CLIENT, top_level_only=True)) <= {"contract", "protos"}


def test_nothing_imports_a_cli() -> None:
    cli_modules = {c.removesuffix(".py").replace("/", ".") for c in CLIS}
    for package in OURS:
        for path in files(package):
            if rel(path) in CLIS:
                continue
            assert not imports(path) & cli_modules, rel(path)


def test_contract_and_codecs_load_without_any_side() -> None:
    code = (
        "import sys\n"
        "import contract.types, contract.limits, contract.status, contract.requests\n"
        "import protos.worker_codec, protos.gateway_codec\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('workers', 'cluster', 'mlx', 'mlx_lm', 'ray', 'grpc'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
