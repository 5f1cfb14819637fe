"""The indexed policy (cluster/policy.py, cluster/fleet.py) chooses exactly what the simple
scanning policy (tests/cluster/reference_policy.py) chooses: same requests, same worker, same
bucket, same order, same wake-ups and expiries, on random workloads with `now` moving forward."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.policy import (
    BatchPolicy,
    Fleet,
    PendingRequest,
    PolicyConfig,
    QueueFullError,
    WorkerCapacity,
)
from tests.cluster.reference_policy import ReferencePolicy

WORKERS = [f"w{i}" for i in range(6)]

submit_op = st.tuples(
    st.just("submit"),
    st.sampled_from([1, 10, 16, 17, 30, 100, 300]),  # prompt tokens: a few buckets
    st.integers(1, 64),  # max_tokens
    st.integers(0, 2),  # priority
    st.one_of(st.none(), st.floats(0, 0.02)),  # deadline after now
    st.floats(-0.01, 0.002),  # arrival relative to now (requeues arrive "in the past")
    st.booleans(),  # requeue (bypasses the queue bound)
)
cap = st.tuples(
    st.sampled_from(WORKERS),
    st.integers(-1, 6),  # free slots (a shrunk worker may report fewer than in flight)
    st.sampled_from([0, 50, 200, 2000]),  # free KV tokens
    st.integers(0, 4),  # in flight
    st.sampled_from([0, 2, 4, 8]),  # max slots: few distinct loads, so ties are common
)
ops = st.lists(
    st.one_of(
        submit_op,
        st.tuples(st.just("advance"), st.floats(0, 0.004)),
        st.tuples(st.just("cancel"), st.integers(0, 200)),
        st.tuples(st.just("expire")),
        st.tuples(st.just("wake")),
        st.tuples(st.just("round"), st.lists(cap, max_size=6)),
    ),
    max_size=60,
)


def shape(batches: list[Any]) -> list[tuple[str, int, list[str]]]:
    return [(b.worker_id, b.bucket, [r.request_id for r in b.requests]) for b in batches]


def config(window: float, max_batch: int) -> PolicyConfig:
    return PolicyConfig(max_queue=12, coalesce_window_s=window, max_batch_size=max_batch)


@settings(max_examples=300, deadline=None)
@given(ops=ops, window=st.sampled_from([0.0, 0.003]), max_batch=st.sampled_from([1, 2, 64]))
def test_same_choices_as_reference(ops: list[tuple], window: float, max_batch: int) -> None:
    fast, ref = BatchPolicy(config(window, max_batch)), ReferencePolicy(config(window, max_batch))
    now, ids = 1.0, []
    for op in ops:
        if op[0] == "submit":
            _, n, mt, prio, dl, arr, requeue = op
            rid = f"r{len(ids)}"
            r = dict(request_id=rid, num_prompt_tokens=n, max_tokens=mt, arrival=now + arr)
            r.update(priority=prio, deadline=None if dl is None else now + dl)
            outcomes = []
            for p in (fast, ref):
                try:
                    p.submit(PendingRequest(**r), requeue=requeue)  # type: ignore[arg-type]
                    outcomes.append("ok")
                except QueueFullError:
                    outcomes.append("full")
            assert outcomes[0] == outcomes[1]
            ids.append(rid)
        elif op[0] == "advance":
            now += op[1]
        elif op[0] == "cancel" and ids:
            rid = ids[op[1] % len(ids)]
            a, b = fast.cancel(rid), ref.cancel(rid)
            assert (a and a.request_id) == (b and b.request_id)
        elif op[0] == "expire":
            assert [r.request_id for r in fast.expire(now)] == [
                r.request_id for r in ref.expire(now)
            ]
        elif op[0] == "wake":
            assert fast.next_wakeup(now) == ref.next_wakeup(now)
        elif op[0] == "round":
            caps = [WorkerCapacity(*c) for c in op[1]]
            caps = list({c.worker_id: c for c in caps}.values())  # one entry per worker
            assert shape(fast.form_batches(caps, now)) == shape(ref.form_batches(caps, now))
        assert len(fast) == len(ref)


fleet_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.sampled_from([5, 20, 40, 200]),
            st.integers(1, 48),
            st.integers(0, 1),
        ),
        st.tuples(
            st.just("join"), st.sampled_from(WORKERS), st.integers(1, 6), st.integers(50, 600)
        ),
        st.tuples(st.just("leave"), st.sampled_from(WORKERS)),
        st.tuples(st.just("finish"), st.integers(0, 1000)),
        st.tuples(st.just("round"), st.floats(0, 0.004)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=fleet_ops)
def test_persistent_fleet_matches_reference_over_many_rounds(ops: list[tuple]) -> None:
    """The scheduler's way: one Fleet kept up to date by join / leave / finish, charged by
    placement. Each round, the reference gets the capacities recomputed from scratch."""
    cfg = PolicyConfig(max_queue=10_000, coalesce_window_s=0.003)
    fast, ref, fleet = BatchPolicy(cfg), ReferencePolicy(cfg), Fleet()
    totals: dict[str, tuple[int, int]] = {}  # worker -> (max slots, KV budget)
    running: dict[str, list[tuple[str, int]]] = {}  # worker -> [(request, kv tokens)]
    now, n = 1.0, 0

    def capacity(wid: str) -> WorkerCapacity:
        slots, kv = totals[wid]
        mine = running[wid]
        return WorkerCapacity(
            wid, slots - len(mine), kv - sum(k for _, k in mine), len(mine), slots
        )

    for op in ops:
        if op[0] == "submit":
            r = PendingRequest(f"r{n}", op[1], op[2], arrival=now, priority=op[3])
            fast.submit(r)
            ref.submit(PendingRequest(f"r{n}", op[1], op[2], arrival=now, priority=op[3]))
            n += 1
        elif op[0] == "join" and op[1] not in totals:
            totals[op[1]], running[op[1]] = (op[2], op[3]), []
            fleet.set(capacity(op[1]))
        elif op[0] == "leave" and op[1] in totals:
            del totals[op[1]], running[op[1]]
            fleet.remove(op[1])
        elif op[0] == "finish":
            busy = sorted(w for w in running if running[w])
            if busy:
                wid = busy[op[1] % len(busy)]
                _, kv = running[wid].pop(op[1] % len(running[wid]))
                fleet.release(wid, kv)
        elif op[0] == "round":
            now += op[1]
            caps = [capacity(w) for w in totals]
            want = shape(ref.form_batches(caps, now))
            got = fast.form_batches(fleet, now)
            assert shape(got) == want
            for b in got:
                running[b.worker_id] += [(r.request_id, r.kv_tokens) for r in b.requests]
        for wid in totals:
            assert fleet.capacity(wid) == capacity(wid)
        assert fleet.total_free_slots == sum(max(capacity(w).free_slots, 0) for w in totals)
        assert len(fast) == len(ref)


@pytest.mark.parametrize("n_workers", [1, 300])
def test_round_stops_when_capacity_is_gone(n_workers: int) -> None:
    """One free slot and thousands waiting: a round looks at one request, not all of them."""
    p = BatchPolicy(PolicyConfig(max_queue=20_000, coalesce_window_s=0.0))
    for i in range(10_000):
        p.submit(PendingRequest(f"r{i}", 10, 8, arrival=0.0))
    fleet = Fleet.of([WorkerCapacity(f"w{j}", 0, 1000, 8, 8) for j in range(n_workers)])
    fleet.set(WorkerCapacity("free", 1, 1000, 7, 8))
    looked = []
    real_place = __import__("cluster.fleet", fromlist=["PlacementRound"]).PlacementRound.place

    def counting_place(self, r, bucket):  # type: ignore[no-untyped-def]
        looked.append(r.request_id)
        return real_place(self, r, bucket)

    mp = pytest.MonkeyPatch()
    mp.setattr("cluster.fleet.PlacementRound.place", counting_place)
    try:
        got = p.form_batches(fleet, now=1.0)
    finally:
        mp.undo()
    assert shape(got) == [("free", 16, ["r0"])]
    assert looked == ["r0"] and len(p) == 9_999 and fleet.total_free_slots == 0
