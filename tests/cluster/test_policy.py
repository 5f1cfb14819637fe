"""Batch formation policy, driven by a fake clock (plain floats): no Ray, no gRPC."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.policy import (
    BatchPolicy,
    PendingRequest,
    PolicyConfig,
    QueueFullError,
    WorkerCapacity,
    bucket_of,
)

W = 0.003  # coalescing window used in these tests


def req(rid: str, n: int, t: float = 0.0, max_tokens: int = 8, **kw: object) -> PendingRequest:
    return PendingRequest(rid, n, max_tokens, arrival=t, **kw)  # type: ignore[arg-type]


def worker(wid: str, slots: int = 8, kv: int = 10_000, inflight: int = 0, max_slots: int = 8):
    return WorkerCapacity(wid, slots, kv, inflight, max_slots)


def ids(batches) -> list[list[str]]:
    return [[r.request_id for r in b.requests] for b in batches]


def policy(**kw: object) -> BatchPolicy:
    return BatchPolicy(PolicyConfig(coalesce_window_s=W, **kw))  # type: ignore[arg-type]


def test_config_validation_names_value() -> None:
    with pytest.raises(ValueError, match="coalesce_window_s=1.0"):
        PolicyConfig(coalesce_window_s=1.0)
    with pytest.raises(ValueError, match="max_queue=0"):
        PolicyConfig(max_queue=0)
    with pytest.raises(ValueError, match="max_batch_size=0"):
        PolicyConfig(max_batch_size=0)


def test_bucket_edges() -> None:
    assert [bucket_of(n, 16) for n in (1, 16, 17, 32, 33, 64, 65, 1000)] == [
        16,
        16,
        32,
        32,
        64,
        64,
        128,
        1024,
    ]


def test_bounded_queue_raises_and_requeue_bypasses() -> None:
    p = policy(max_queue=3)
    for i in range(3):
        p.submit(req(f"r{i}", 5))
    with pytest.raises(QueueFullError, match="3 requests"):
        p.submit(req("r3", 5))
    p.submit(req("again", 5), requeue=True)  # an accepted request is never dropped
    assert len(p) == 4
    with pytest.raises(ValueError, match="already waiting"):
        p.submit(req("r0", 5))


def test_coalescing_window_holds_then_releases() -> None:
    p = policy()
    p.submit(req("a", 10, t=0.0))
    assert p.form_batches([worker("w")], now=0.001) == []
    assert p.next_wakeup(0.001) == pytest.approx(W)
    assert ids(p.form_batches([worker("w")], now=W)) == [["a"]]
    assert len(p) == 0 and p.next_wakeup(W) is None


def test_full_bucket_leaves_before_window() -> None:
    p = policy()
    for i in range(4):
        p.submit(req(f"r{i}", 10, t=0.0))
    # 4 free slots in total and 4 same-bucket requests: no reason to wait.
    got = p.form_batches([worker("w", slots=4, max_slots=4)], now=0.0)
    assert ids(got) == [["r0", "r1", "r2", "r3"]]


def test_window_never_exceeded_under_trickle() -> None:
    """Requests arriving every ms: nobody waits longer than the window (given capacity)."""
    p = policy()
    waited: list[float] = []
    now = 0.0
    arrivals = {}
    for step in range(100):
        now = step * 0.001
        if step < 60:
            p.submit(req(f"r{step}", 10, t=now))
            arrivals[f"r{step}"] = now
        for b in p.form_batches([worker("w", slots=64, max_slots=64)], now=now):
            waited += [now - arrivals[r.request_id] for r in b.requests]
    assert len(waited) == 60 and max(waited) <= W + 1e-9


def test_bucketing_separates_lengths_and_limits_padding() -> None:
    p = policy()
    rng = random.Random(0)
    lengths = [rng.choice([3, 5, 12, 40, 50, 60, 300, 500]) for _ in range(40)]
    for i, n in enumerate(lengths):
        p.submit(req(f"r{i}", n))
    batches = p.form_batches([worker("w", slots=64, max_slots=64)], now=1.0)
    assert sum(len(b.requests) for b in batches) == 40
    for b in batches:
        assert len({bucket_of(r.num_prompt_tokens, 16) for r in b.requests}) == 1
        # Within a power-of-two bucket (above the first) a row is padded to at most 2x.
        if b.bucket > 16:
            assert min(r.num_prompt_tokens for r in b.requests) * 2 > b.bucket // 2
    one_batch_padding = 1 - sum(lengths) / (len(lengths) * max(lengths))
    mixed = sum(b.num_padded_tokens for b in batches) - sum(lengths)
    assert mixed / sum(b.num_padded_tokens for b in batches) < one_batch_padding


def test_slot_budget_respected_and_rest_waits() -> None:
    p = policy()
    for i in range(10):
        p.submit(req(f"r{i}", 10))
    got = p.form_batches([worker("a", slots=3), worker("b", slots=2)], now=1.0)
    per = {b.worker_id: len(b.requests) for b in got}
    assert per == {"a": 3, "b": 2}
    assert len(p) == 5
    assert p.form_batches([worker("a", slots=0), worker("b", slots=0)], now=2.0) == []


def test_kv_budget_respected_and_small_requests_backfill() -> None:
    p = policy()
    p.submit(req("big", 100, max_tokens=100, priority=5))  # needs 200 KV tokens
    p.submit(req("small", 10, max_tokens=10))  # needs 20
    got = p.form_batches([worker("w", kv=150)], now=1.0)
    assert ids(got) == [["small"]]  # big does not fit now; small backfills
    assert "big" in p
    got = p.form_batches([worker("w", kv=200)], now=1.0)
    assert ids(got) == [["big"]]


def test_kv_budget_accumulates_within_one_round() -> None:
    p = policy()
    for i in range(5):
        p.submit(req(f"r{i}", 10, max_tokens=10))  # 20 each
    got = p.form_batches([worker("w", slots=8, kv=65)], now=1.0)
    assert sum(len(b.requests) for b in got) == 3  # 60 <= 65 < 80


def test_fits_any_for_admission() -> None:
    p = policy()
    totals = [worker("a", kv=100), worker("b", kv=300)]
    assert p.fits_any(req("x", 200, max_tokens=100), totals)
    assert not p.fits_any(req("x", 250, max_tokens=100), totals)


def test_placement_by_load_balances_idle_workers() -> None:
    p = policy()
    for i in range(20):
        p.submit(req(f"r{i}", 10))
    got = p.form_batches([worker("a", slots=16, max_slots=16), worker("b", 16, max_slots=16)], 1.0)
    assert sorted(len(b.requests) for b in got) == [10, 10]


def test_placement_prefers_less_loaded_worker() -> None:
    p = policy()
    for i in range(4):
        p.submit(req(f"r{i}", 10))
    busy = worker("busy", slots=2, inflight=6, max_slots=8)
    idle = worker("idle", slots=8, inflight=0, max_slots=8)
    got = p.form_batches([busy, idle], now=1.0)
    per = {b.worker_id: len(b.requests) for b in got}
    # idle goes from 0/8 up to 4/8 before busy (6/8) would be the least loaded.
    assert per == {"idle": 4}


def test_priorities_take_scarce_slots() -> None:
    p = policy()
    for i in range(5):
        p.submit(req(f"low{i}", 10, t=0.0))
    p.submit(req("high", 300, t=0.5, priority=10))
    got = p.form_batches([worker("w", slots=2)], now=1.0)
    flat = [r for b in got for r in b.requests]
    assert [r.request_id for r in flat] == ["high", "low0"]
    assert got[0].requests[0].request_id == "high"  # most urgent batch first


def test_deadlines_edf_within_priority_and_expiry() -> None:
    p = policy()
    p.submit(req("late", 10, t=0.0, deadline=9.0))
    p.submit(req("soon", 10, t=0.5, deadline=2.0))
    p.submit(req("none", 10, t=0.0))
    got = p.form_batches([worker("w", slots=1)], now=1.0)
    assert ids(got) == [["soon"]]
    assert [r.request_id for r in p.expire(now=9.0)] == ["late"]
    assert "none" in p and "late" not in p


def test_deadline_shortcuts_window() -> None:
    p = policy()
    p.submit(req("d", 10, t=1.0, deadline=1.002))
    # Less than a window left before its deadline: dispatch now rather than coalesce.
    assert ids(p.form_batches([worker("w")], now=1.0)) == [["d"]]


def test_next_wakeup_includes_deadline() -> None:
    p = policy()
    p.submit(req("d", 10, t=0.0, deadline=5.0))
    assert p.next_wakeup(0.0) == pytest.approx(W)
    assert p.next_wakeup(1.0) == pytest.approx(5.0 - W)
    assert p.next_wakeup(4.999) == pytest.approx(5.0)


def test_cancel_removes_waiting() -> None:
    p = policy()
    p.submit(req("a", 10))
    assert p.cancel("a") is not None and p.cancel("a") is None
    assert p.form_batches([worker("w")], now=1.0) == []


def test_max_batch_size_splits_dispatch() -> None:
    p = policy(max_batch_size=3)
    for i in range(7):
        p.submit(req(f"r{i}", 10))
    got = p.form_batches([worker("w", slots=16, max_slots=16)], now=1.0)
    assert [len(b.requests) for b in got] == [3]  # one batch per (worker, bucket) per round
    assert len(p) == 4


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 600), min_size=1, max_size=60),
    caps=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3000)), min_size=1, max_size=4),
    now=st.floats(0, 0.01),
)
def test_invariants_random(lengths: list[int], caps: list[tuple[int, int]], now: float) -> None:
    """Never over-commit a worker, never lose or duplicate a request."""
    p = policy()
    for i, n in enumerate(lengths):
        p.submit(req(f"r{i}", n, t=0.0, max_tokens=16))
    workers = [worker(f"w{j}", s, kv, max_slots=12) for j, (s, kv) in enumerate(caps)]
    batches = p.form_batches(workers, now=now)
    taken = [r.request_id for b in batches for r in b.requests]
    assert len(taken) == len(set(taken))
    assert len(taken) + len(p) == len(lengths)
    assert not any(t in p for t in taken)
    for w in workers:
        mine = [r for b in batches if b.worker_id == w.worker_id for r in b.requests]
        assert len(mine) <= w.free_slots
        assert sum(r.kv_tokens for r in mine) <= w.kv_free_tokens
