"""specfleet worker side: the MLX engine (and, in workers/service, its gRPC/Ray host).

Exports resolve lazily so that `import workers.types` (used by the cluster, which must not
import mlx) stays free of mlx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.types import Completion, EngineInfo, RequestOutput, RoundStats, SamplingParams

if TYPE_CHECKING:
    from workers.drafters.model import ModelDrafter
    from workers.drafters.ngram import NgramDrafter
    from workers.engine import Engine

__all__ = [
    "Completion",
    "Engine",
    "EngineInfo",
    "ModelDrafter",
    "NgramDrafter",
    "RequestOutput",
    "RoundStats",
    "SamplingParams",
]

_LAZY = {
    "Engine": "workers.engine",
    "ModelDrafter": "workers.drafters.model",
    "NgramDrafter": "workers.drafters.ngram",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
