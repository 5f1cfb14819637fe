"""The scheduler's names for the worker wire codec. protos/worker_codec.py owns the format, both
directions, for both sides; nothing is defined here (cluster/scheduler.py imports these)."""

from protos.worker_codec import RequestError as WorkerRejection
from protos.worker_codec import SubmitRequest as WorkerSubmit
from protos.worker_codec import WorkerInfo as WorkerStatus

__all__ = ["WorkerRejection", "WorkerStatus", "WorkerSubmit"]
