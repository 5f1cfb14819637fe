"""The worker service: gRPC server, metrics endpoint, Ray actor host and CLI for one Engine.

Lazy exports, so that nothing here imports grpc servers or mlx until they are used (the wire
codec both sides share is protos/worker_codec.py).
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "WorkerServer": "workers.service.grpc_server",
    "WorkerServerConfig": "workers.service.grpc_server",
    "WorkerClient": "workers.service.grpc_client",
    "worker_main": "workers.service.cli",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workers.service' has no attribute {name!r}")
