"""Scheduler metrics on their own prometheus_client registry (labels never carry request ids)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_SIZE_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        p = "specfleet_scheduler_"
        self.queue_depth = Gauge(p + "queue_depth", "Requests waiting for a worker", registry=r)
        self.queue_time = Histogram(
            p + "queue_time_seconds",
            "Arrival to first dispatch",
            buckets=_TIME_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            p + "batch_size", "Requests per dispatched batch", buckets=_SIZE_BUCKETS, registry=r
        )
        self.padding_ratio = Histogram(
            p + "padding_ratio",
            "1 - real/padded prompt tokens of a dispatched batch",
            buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
            registry=r,
        )
        self.inflight = Gauge(
            p + "worker_inflight", "Requests in flight per worker", ["worker"], registry=r
        )
        self.requeues = Counter(
            p + "requeues", "In-flight requests re-queued after a worker fault", registry=r
        )
        self.worker_restarts = Counter(
            p + "worker_restarts",
            "Worker reconnections after a lost stream",
            ["worker"],
            registry=r,
        )
        self.workers_connected = Gauge(
            p + "workers_connected", "Workers with a live session", registry=r
        )
        self.requests = Counter(
            p + "requests", "Finished requests by outcome", ["outcome"], registry=r
        )
        self.rejected = Counter(
            p + "rejected", "Requests refused at admission", ["reason"], registry=r
        )
        self.tick_failures = Counter(
            p + "tick_failures", "Dispatch passes that raised (a scheduler bug)", registry=r
        )
        self.generated_tokens = Counter(
            p + "generation_tokens", "Tokens delivered to clients", registry=r
        )

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics over HTTP; returns the bound port (pass 0 for any free port)."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
