"""specfleet cluster: Ray scheduler actor, batch formation, gateway, client, offline jobs.

Never imports mlx (the tokenizer here is `tokenizers` + jinja2). Exports resolve lazily so that
`import cluster` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster.client import Client, CompletionResult, QueueFullError, SpecfleetError

__all__ = ["Client", "CompletionResult", "QueueFullError", "SpecfleetError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cluster import client

        return getattr(client, name)
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")
