"""Engine stats -> Prometheus metrics (vLLM semantics under the `specfleet_` prefix).

The engine fills plain `RoundStats` / `RequestOutput`; this module is the only place that
turns them into `prometheus_client` metrics. Each worker owns a private `CollectorRegistry`
(never the global one), so several workers in one process (tests, one-box clusters) never
collide. Labels are `worker` and `model` only, never request ids. Ratios are left to PromQL:
acceptance rate = rate(accepted_tokens) / rate(draft_tokens); mean acceptance length =
1 + rate(accepted_tokens) / rate(drafts).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from workers.types import EngineInfo, RequestOutput, RoundStats

PREFIX = "specfleet_"
LABELS = ("worker", "model")
ROUND_PHASES = ("draft", "verify", "compact")

# Bucket edges follow vLLM's so dashboards port over; round/batch buckets fit a Mac worker.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
)
ITL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ROUND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class _RequestTimes:
    arrival: float
    last_token: float | None = None


class WorkerMetrics:
    """Thread-safe: the engine thread records, the HTTP thread scrapes."""

    def __init__(self, worker: str, model: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.labels = {"worker": worker, "model": model}
        r = self.registry

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, (*LABELS, *extra), registry=r)

        def hist(name: str, doc: str, buckets: tuple, extra: tuple[str, ...] = ()) -> Histogram:
            return Histogram(PREFIX + name, doc, (*LABELS, *extra), buckets=buckets, registry=r)

        self.num_drafts = counter(
            "spec_decode_num_drafts",
            "Speculative rows that proposed >= 1 draft token, summed over rounds.",
        )
        self.num_draft_tokens = counter("spec_decode_num_draft_tokens", "Draft tokens proposed.")
        self.num_accepted_tokens = counter(
            "spec_decode_num_accepted_tokens", "Draft tokens accepted."
        )
        self.accepted_per_pos = counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens by draft position (0-based).",
            ("position",),
        )
        self.generation_tokens = counter("generation_tokens", "Tokens emitted to clients.")
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens prefilled.")
        # Prefix cache, vLLM's prefix_cache_queries / prefix_cache_hits semantics (tokens):
        # hit rate = rate(hits) / rate(queries), per worker in PromQL.
        self.prefix_queries = counter(
            "prefix_cache_queries", "Prompt tokens looked up in the prefix cache."
        )
        self.prefix_hits = counter(
            "prefix_cache_hits", "Prompt tokens found in the prefix cache (prefill skipped)."
        )
        self.prefix_evicted = counter(
            "prefix_cache_evicted_tokens", "Prefix-cache tokens evicted (least recently used)."
        )
        self.prefix_usage = Gauge(
            PREFIX + "prefix_cache_usage_tokens", "Tokens held by the prefix cache.", LABELS,
            registry=r,
        )  # fmt: skip
        self.prefix_capacity = Gauge(
            PREFIX + "prefix_cache_capacity_tokens",
            "Prefix-cache capacity in tokens; `state` is on, off, or why the engine refused it "
            "(recurrent_layers: hybrid models are not cached).",
            (*LABELS, "state"),
            registry=r,
        )
        self._prefix_state: str | None = None
        self.request_success = counter(
            "request_success", "Finished requests by finish reason.", ("finished_reason",)
        )
        self.ttft = hist(
            "time_to_first_token_seconds", "Arrival at the worker to first token.", TTFT_BUCKETS
        )
        self.itl = hist(
            "inter_token_latency_seconds",
            "Time between consecutive token deltas of a request.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "e2e_request_latency_seconds", "Arrival at the worker to finish.", E2E_BUCKETS
        )
        self.round_duration = hist(
            "round_duration_seconds", "Time per engine round by phase.", ROUND_BUCKETS, ("phase",)
        )
        self.batch_size = hist(
            "batch_size", "Rows in the running batch per decode round.", BATCH_BUCKETS
        )
        self.decode_rounds = counter(
            "decode_rounds",
            "Decode rounds by the most drafts a row proposed (draft_depth 0: plain decoding): "
            "how the adaptive depth policy spends its rounds.",
            ("draft_depth",),
        )
        self.num_running = Gauge(
            PREFIX + "num_requests_running", "Requests in the running batch.", LABELS, registry=r
        )
        self.num_waiting = Gauge(
            PREFIX + "num_requests_waiting",
            "Requests waiting for a batch slot.",
            LABELS,
            registry=r,
        )
        # Create the unlabelled-beyond-worker series now so a fresh worker scrapes as zeros.
        for m in (
            self.num_drafts,
            self.num_draft_tokens,
            self.num_accepted_tokens,
            self.generation_tokens,
            self.prompt_tokens,
            self.prefix_queries,
            self.prefix_hits,
            self.prefix_evicted,
            self.prefix_usage,
            self.ttft,
            self.itl,
            self.e2e,
            self.batch_size,
            self.num_running,
            self.num_waiting,
        ):
            m.labels(**self.labels)
        self._times: dict[str, _RequestTimes] = {}
        self._lock = threading.Lock()
        self._http_server: Any = None
        self._http_thread: Any = None

    # ------------------------------------------------------------ recording

    def on_request_added(self, request_id: str, now: float) -> None:
        with self._lock:
            self._times[request_id] = _RequestTimes(arrival=now)

    def on_round(self, stats: RoundStats) -> None:
        lab = self.labels
        self.num_drafts.labels(**lab).inc(stats.num_drafts)
        self.num_draft_tokens.labels(**lab).inc(stats.num_draft_tokens)
        self.num_accepted_tokens.labels(**lab).inc(stats.num_accepted_tokens)
        for pos, n in enumerate(stats.accepted_per_pos):
            self.accepted_per_pos.labels(**lab, position=str(pos)).inc(n)
        self.prompt_tokens.labels(**lab).inc(stats.num_prefill_tokens)
        self.prefix_queries.labels(**lab).inc(stats.num_prefix_queried_tokens)
        self.prefix_hits.labels(**lab).inc(stats.num_prefix_hit_tokens)
        self.prefix_evicted.labels(**lab).inc(stats.num_prefix_evicted_tokens)
        if stats.batch_size > 0:  # a decode round ran (prefill-only rounds have no draft/verify)
            self.batch_size.labels(**lab).observe(stats.batch_size)
            self.decode_rounds.labels(**lab, draft_depth=str(stats.draft_depth)).inc()
            for phase in ROUND_PHASES:
                self.round_duration.labels(**lab, phase=phase).observe(
                    getattr(stats, f"time_{phase}_s")
                )

    def on_outputs(self, outputs: list[RequestOutput], now: float) -> None:
        lab = self.labels
        with self._lock:
            for out in outputs:
                times = self._times.get(out.request_id)
                if out.new_tokens:
                    self.generation_tokens.labels(**lab).inc(len(out.new_tokens))
                    if times is not None:
                        if times.last_token is None:
                            self.ttft.labels(**lab).observe(now - times.arrival)
                        else:
                            self.itl.labels(**lab).observe(now - times.last_token)
                        times.last_token = now
                if out.finished:
                    self.request_success.labels(
                        **lab, finished_reason=out.finish_reason or "unknown"
                    ).inc()
                    if times is not None:
                        self.e2e.labels(**lab).observe(now - times.arrival)
                    self._times.pop(out.request_id, None)

    def set_queue(self, num_running: int, num_waiting: int) -> None:
        self.num_running.labels(**self.labels).set(num_running)
        self.num_waiting.labels(**self.labels).set(num_waiting)

    def set_prefix_cache(self, info: EngineInfo) -> None:
        state = getattr(info, "prefix_cache_state", "off")
        if state != self._prefix_state:  # one series per worker: drop the old state's
            if self._prefix_state is not None:
                self.prefix_capacity.remove(*self.labels.values(), self._prefix_state)
            self._prefix_state = state
        self.prefix_capacity.labels(**self.labels, state=state).set(info.prefix_cache_tokens)
        self.prefix_usage.labels(**self.labels).set(info.prefix_cache_used_tokens)

    # ------------------------------------------------------------ HTTP endpoint

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve /metrics for this registry on its own HTTP port; returns the bound port."""
        self._http_server, self._http_thread = start_http_server(
            port, addr=host, registry=self.registry
        )
        return int(self._http_server.server_port)

    def close(self) -> None:
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
            self._http_server = None
