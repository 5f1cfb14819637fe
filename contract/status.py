"""Status codes and worker states: one enum each, used by every side.

`StatusCode` members are gRPC status names (mapped to `grpc.StatusCode` only in the servers and
the client); `WorkerState` is a worker's life cycle as its Info reports it. Both are `str`
enums, so they travel on the wire as plain strings and compare equal to them.
"""

from __future__ import annotations

from enum import Enum


class StatusCode(str, Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INTERNAL = "INTERNAL"

    # The bare name in messages and f-strings on every Python version (3.12 changed format()).
    __str__ = str.__str__
    __format__ = str.__format__


class WorkerState(str, Enum):
    """loading -> serving -> draining -> stopped, or failed from any state."""

    LOADING = "loading"
    SERVING = "serving"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"

    __str__ = str.__str__
    __format__ = str.__format__
