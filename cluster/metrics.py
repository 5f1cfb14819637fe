"""Scheduler metrics on their own prometheus_client registry (labels never carry request ids)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_SIZE_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class PlainHistogram:
    """A histogram kept as plain numbers and exported when scraped: `observe` is a bisect and
    two adds (no lock, no per-call object), cheap enough for per-request use on the scheduler's
    single loop thread. A scrape racing an observe may see the count one ahead of the sum."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation = name, documentation
        self.upper = [float(b) for b in buckets] + [float("inf")]
        self.counts = [0] * len(self.upper)  # [num_buckets + 1], not cumulative
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.upper, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def family(self) -> HistogramMetricFamily:
        cumulative, total = [], 0
        for le, n in zip(self.upper, self.counts):
            total += n
            cumulative.append((floatToGoString(le), total))
        return HistogramMetricFamily(
            self.name, self.documentation, buckets=cumulative, sum_value=self.sum
        )


class _PlainCollector:
    def __init__(self, histograms: list[PlainHistogram]) -> None:
        self.histograms = histograms

    def collect(self) -> Iterator[Metric]:
        for h in self.histograms:
            yield h.family()


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        p = "specfleet_scheduler_"
        self.queue_depth = Gauge(p + "queue_depth", "Requests waiting for a worker", registry=r)
        # Observed per request or per batch: plain numbers, exported when scraped.
        self.queue_time = PlainHistogram(
            p + "queue_time_seconds", "Arrival to first dispatch", _TIME_BUCKETS
        )
        self.batch_size = PlainHistogram(
            p + "batch_size", "Requests per dispatched batch", _SIZE_BUCKETS
        )
        self.padding_ratio = PlainHistogram(
            p + "padding_ratio",
            "1 - real/padded prompt tokens of a dispatched batch",
            (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
        )
        r.register(_PlainCollector([self.queue_time, self.batch_size, self.padding_ratio]))
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
