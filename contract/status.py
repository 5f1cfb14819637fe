"""Status codes and worker states: one enum each, used by every side.

`StatusCode` members are gRPC status names (mapped to `grpc.StatusCode` only in the servers and
the client); `WorkerState` is a worker's life cycle as its Info reports it. Both are `str`
enums, so they travel on the wire as plain strings and compare equal to them.
"""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    """Prints as its bare value on every Python version (3.12 changed format() of mixins)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class StatusCode(_StrEnum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INTERNAL = "INTERNAL"


class WorkerState(_StrEnum):
    """loading -> serving -> draining -> stopped, or failed from any state."""

    LOADING = "loading"
    SERVING = "serving"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"
