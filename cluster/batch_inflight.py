"""How much an offline batch job keeps in flight, and how it sends it.

A fixed number of requests in flight (the old default was 64) fills two workers of 32 slots;
on a fleet of eight a newcomer's job used a quarter of it. `FleetInFlight` sizes the job from
the cluster itself: total batch slots of the serving workers (ClusterInfo) times a headroom, so
the scheduler always holds the next requests when a slot frees, re-read every few seconds so
the job follows workers that join or leave. The same reading gives the fleet's utilisation
(busy slots / total slots) for the progress bar.

`chunked_client_backend` sends requests as `SubmitBatch` calls of many requests instead of one
call each: the gateway admits a whole chunk in one go and the scheduler places it in one round.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from cluster.openai_format import BodyError, GenerationResult, ParsedBody, parse_body


@dataclass(frozen=True)
class FleetReading:
    workers: int  # serving workers
    total_slots: int  # their batch slots
    busy_slots: int  # requests in flight on them

    @property
    def utilisation(self) -> float:
        return self.busy_slots / self.total_slots if self.total_slots else 0.0


def read_fleet(info: Any) -> FleetReading:
    """A ClusterInfoResponse (or anything shaped like it) -> serving workers' slots."""
    serving = [w for w in info.workers if w.connected and w.state == "serving"]
    return FleetReading(
        len(serving),
        sum(w.max_batch_size for w in serving),
        sum(min(w.inflight, w.max_batch_size) for w in serving),
    )


class FleetInFlight:
    """Requests in flight = fleet slots x headroom, clamped to [minimum, maximum]; the fleet is
    re-read at most every `refresh_s` (thread-safe; a failed read keeps the last one)."""

    def __init__(
        self,
        read: Callable[[], FleetReading],
        *,
        headroom: float = 1.5,
        minimum: int = 8,
        maximum: int = 4096,
        refresh_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not headroom >= 1.0:
            raise ValueError(f"FleetInFlight headroom={headroom!r}: use >= 1.0 (1.5 is typical)")
        if not 1 <= minimum <= maximum:
            raise ValueError(
                f"FleetInFlight minimum={minimum!r} maximum={maximum!r}: use 1 <= minimum <= maximum"
            )
        self.read, self.headroom = read, headroom
        self.minimum, self.maximum, self.refresh_s = minimum, maximum, refresh_s
        self.clock = clock
        self.last: FleetReading | None = None
        self._read_at = -math.inf
        self._lock = threading.Lock()

    def reading(self) -> FleetReading | None:
        with self._lock:
            now = self.clock()
            if now - self._read_at >= self.refresh_s:
                self._read_at = now
                try:
                    self.last = self.read()
                except Exception:  # the gateway restarting: keep sizing from the last reading
                    pass
            return self.last

    def __call__(self) -> int:
        r = self.reading()
        slots = r.total_slots if r is not None else 0
        return max(self.minimum, min(self.maximum, math.ceil(slots * self.headroom)))

    def describe(self) -> str:
        """For the progress bar: fleet utilisation and size."""
        r = self.reading()
        if r is None:
            return "fleet ?"
        return (
            f"fleet {r.utilisation:4.0%} busy ({r.busy_slots}/{r.total_slots} slots, "
            f"{r.workers} workers)"
        )


def chunk_size(in_flight: int, maximum: int = 512) -> int:
    """Requests per SubmitBatch call: a quarter of what is in flight (so one slow chunk never
    holds most of the job), at most `maximum`, at least 1."""
    return max(1, min(maximum, in_flight // 4))


def chunked_client_backend(
    client: Any, request_id: Callable[[ParsedBody, str], str], retries: int = 8
) -> Callable[[Sequence[tuple[ParsedBody, str]]], list[GenerationResult | Exception]]:
    """Batch-job backend sending a chunk as one SubmitBatch through the Python client (each
    item with its own params, priority and request id). Items refused with RESOURCE_EXHAUSTED
    (queue full) or UNAVAILABLE are sent again with backoff; INVALID_ARGUMENT becomes a
    BodyError (a 400 for that line)."""
    from cluster.client import InvalidRequestError, QueueFullError, Unavailable, make_input

    def call_many(items: Sequence[tuple[ParsedBody, str]]) -> list[GenerationResult | Exception]:
        out: list[GenerationResult | Exception | None] = [None] * len(items)
        todo = list(range(len(items)))
        for attempt in range(retries + 1):
            inputs, sent = [], []
            for i in todo:
                parsed, cid = items[i]
                try:
                    inputs.append(
                        make_input(
                            _prompt(parsed),
                            params=parsed.params,
                            priority=parsed.priority,
                            request_id=request_id(parsed, cid),
                        )
                    )
                    sent.append(i)
                except (TypeError, ValueError) as e:  # this line's body, not the chunk
                    out[i] = BodyError(str(e))
            try:
                res = client.generate_batch(inputs, return_exceptions=True) if inputs else []
            except (QueueFullError, Unavailable) as e:
                res = [e] * len(sent)
            todo = sent
            again: list[int] = []
            for i, r in zip(todo, res):
                if isinstance(r, (QueueFullError, Unavailable)) and attempt < retries:
                    again.append(i)
                elif isinstance(r, InvalidRequestError):
                    out[i] = BodyError(r.message)
                elif isinstance(r, Exception):
                    out[i] = r
                else:
                    out[i] = _generation(r)
            if not again:
                break
            todo = again
            time.sleep(min(0.05 * 2**attempt, 2.0))
        return [x if x is not None else RuntimeError("no result") for x in out]

    return call_many


def _prompt(parsed: ParsedBody) -> Any:
    return parsed.messages if parsed.is_chat else parsed.prompt


def _generation(res: Any) -> GenerationResult:
    return GenerationResult(
        text=res.text,
        finish_reason=res.finish_reason,
        num_prompt_tokens=res.usage.prompt_tokens,
        num_generated_tokens=res.usage.completion_tokens,
        tokens=res.tokens,
        num_draft_tokens=res.usage.draft_tokens,
        num_accepted_tokens=res.usage.accepted_tokens,
        num_cached_tokens=res.usage.cached_tokens,
        request_id=res.request_id,
        logprobs=res.logprobs,
    )


@dataclass(frozen=True)
class ChunkedBackend:
    """What `run_batch` needs to send a job in chunks: the chunk call, how many requests to keep
    in flight right now, and (optional) a progress-bar suffix such as fleet utilisation."""

    call_many: Callable[[Sequence[tuple[ParsedBody, str]]], list[GenerationResult | Exception]]
    in_flight: Callable[[], int]
    status: Callable[[], str] | None = None
    max_chunk: int = 512


Line = tuple[str, str | None, Any]  # (custom_id, url, body) of one valid input line


def submit_chunk(
    pool: Executor, backend: ChunkedBackend, chunk: list[Line]
) -> dict[Future[tuple[ParsedBody, GenerationResult]], tuple[str, str | None]]:
    """Run one chunk on the pool; returns a future per line (its result or its exception, as
    the per-request path gives them) keyed to (custom_id, url)."""
    futures: list[Future[tuple[ParsedBody, GenerationResult]]] = [Future() for _ in chunk]

    def run() -> None:
        items: list[tuple[ParsedBody, str]] = []
        where: list[int] = []
        for i, (cid, url, body) in enumerate(chunk):
            try:
                items.append((parse_body(body, url), cid))
                where.append(i)
            except Exception as e:  # BodyError: a 400 for this line only
                futures[i].set_exception(e)
        try:
            results = backend.call_many(items) if items else []
        except Exception as e:  # the whole call failed: every line of the chunk fails with it
            results = [e] * len(items)
        for i, (parsed, _), r in zip(where, items, results):
            if isinstance(r, Exception):
                futures[i].set_exception(r)
            else:
                futures[i].set_result((parsed, r))

    pool.submit(run)
    return {f: (cid, url) for f, (cid, url, _) in zip(futures, chunk)}


def batch_request_id(parsed: ParsedBody, custom_id: str) -> str:
    """A hash of the custom_id and body: a resumed job re-attaches to requests the cluster still
    holds (or has just finished) instead of running them again."""
    key = json.dumps([custom_id, _prompt(parsed), repr(parsed.params)], sort_keys=True)
    return "batch-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def fleet_backend(client: Any, in_flight: int | None = None, retries: int = 8) -> ChunkedBackend:
    """`specfleet batch`'s backend: SubmitBatch chunks; in flight = `in_flight` when given, else
    sized from the fleet (ClusterInfo) as it changes; the progress bar shows its utilisation."""
    fleet = FleetInFlight(lambda: read_fleet(client.cluster_info()))
    limit: Callable[[], int] = fleet if in_flight is None else (lambda: in_flight)
    call_many = chunked_client_backend(client, batch_request_id, retries)
    return ChunkedBackend(call_many, limit, fleet.describe)
