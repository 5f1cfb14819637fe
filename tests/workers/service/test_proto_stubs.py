"""The committed gRPC stubs are exactly what protoc generates from protos/ (never hand-edited)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "protos_generate", ROOT / "protos" / "generate.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_protos() -> None:
    gen = _load_generator()
    assert gen.proto_files(), "no .proto files found under protos/specfleet"
    assert gen.check() == []


def test_stubs_import_without_mlx() -> None:
    # The cluster imports these stubs and must never pull in mlx.
    before = set(sys.modules)
    from protos.specfleet.v1 import worker_pb2, worker_pb2_grpc

    assert worker_pb2.DESCRIPTOR.package == "specfleet.v1"
    assert worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name == "specfleet.v1.Worker"
    assert hasattr(worker_pb2_grpc, "WorkerStub")
    assert not any(m == "mlx" or m.startswith("mlx.") for m in set(sys.modules) - before)
