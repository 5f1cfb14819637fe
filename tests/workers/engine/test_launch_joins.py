"""Rows leaving and joining a batch whose rounds launch from the launcher thread
(workers/launch.py), every round forced there (`launched`): no settle where the batch changes
(a leaving row's cache gather only builds a graph; a joiner's prefill and prefix-cache copies
queue behind the round), no join's wait charged to a round's cost, and every row's tokens
mlx-lm's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.tiny import VOCAB, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine import launcher_thread
from tests.workers.engine.launcher_thread import counted_settles, hold_launches
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, launch
from workers.depth_policy import DepthPolicy

launched = launcher_thread.launched  # autouse: every round here from the launcher thread


@pytest.mark.parametrize("route_joins", [True, False])
def test_rows_leave_and_join_a_routed_batch_with_no_settle(launched, route_joins):
    """With rows running, a routed step settles nowhere: not while requests wait on a full batch
    (a settle every step serialised each launch with the step's host work: on the H200 plain
    rounds ran 1.5x and depth-3 rounds 1.35x faster without it, bench/results/s35), and not
    where rows leave or join either: a leaving row's cache gather only builds a graph, and a
    joiner's prefill is queued behind the round (a settle and the prefill's encode on the
    engine thread were ~6 of a depth-3 join step's ~15 ms on the H200, bench/results/s40).
    With `route_joins` off (the A/B's old arm) it settles exactly where the batch changes. No
    token changes either way."""
    target = tiny_model("qwen3", seed=5, layers=2)
    prompts = mixed_prompts(6, seed=4)
    budgets = [8 + 2 * i for i in range(len(prompts))]
    engine = Engine(target, max_batch_size=2)
    engine.route_joins = route_joins
    settles = counted_settles(engine)
    for i, (p, n) in enumerate(zip(prompts, budgets)):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=n))
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    steady = changed = 0  # running steps with the batch unchanged and a queue; with a change
    while engine.has_work():
        ids, prefilling, before = [r.request_id for r in engine.rows], engine._prefill, len(settles)
        running, queued = bool(engine.rows), bool(engine.waiting)
        for ev in engine.step():
            tokens[ev.request_id] += ev.new_tokens
        if not running:  # nothing launched: the batch's first prefill evaluates here
            continue
        if prefilling or engine._prefill or [r.request_id for r in engine.rows] != ids:
            changed += 1
            if route_joins:
                assert len(settles) == before, "rows left or joined a routed batch with a settle"
            else:
                assert len(settles) > before, "rows left or joined without a settle"
            continue
        assert len(settles) == before, "a step settled with the batch unchanged"
        steady += queued
    assert steady >= 10 and changed >= 5, (steady, changed)
    for i, (p, n) in enumerate(zip(prompts, budgets)):
        assert_matches(tokens[f"r{i}"], reference_greedy(target, p, n), f"row {i}")


def test_routed_joins_with_chunked_prefills_and_the_prefix_cache_match_the_reference(launched):
    """Requests join a running routed batch with prompts prefilled 8 tokens a chunk (several
    launches queued behind each round) and sharing prefixes (the prefix cache's copies are
    queued too, then hit): no step with rows running settles, at least ten launches were queued
    behind rounds (`queue_behind`), and every row's tokens are mlx-lm's."""
    target = tiny_model("qwen3", seed=5, layers=2)
    rng = np.random.default_rng(7)
    base = rng.integers(0, VOCAB, size=40).tolist()
    prompts = [base[: 17 + 4 * i] + rng.integers(0, VOCAB, size=5).tolist() for i in range(6)]
    budgets = [6 + 3 * i for i in range(len(prompts))]
    engine = Engine(target, max_batch_size=2, prefill_step_size=8, prefix_cache_tokens=4096,
                    prefix_block_tokens=8)  # fmt: skip
    behind: list[int] = []
    real_behind = launch.Launcher.queue_behind

    def counted(self, arrays):  # type: ignore[no-untyped-def]
        behind.append(len(arrays))
        return real_behind(self, arrays)

    settles = counted_settles(engine)
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch.Launcher, "queue_behind", counted)
        for i, (p, n) in enumerate(zip(prompts, budgets)):
            engine.add_request(f"r{i}", p, SamplingParams(max_tokens=n))
        while engine.has_work():
            running, before = bool(engine.rows), len(settles)
            for ev in engine.step():
                tokens[ev.request_id] += ev.new_tokens
            assert not running or len(settles) == before, "a step with rows running settled"
    hits = sum(s.num_prefix_hit_tokens for s in engine.take_round_stats())
    assert len(behind) >= 10 and hits > 0, (len(behind), hits)
    for i, (p, n) in enumerate(zip(prompts, budgets)):
        assert_matches(tokens[f"r{i}"], reference_greedy(target, p, n), f"row {i}")


class CostLog(DepthPolicy):
    """Every observed round's cost kept."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.costs: list[float] = []

    def observe(self, draft_counts, num_accepted, step_time_s):  # type: ignore[no-untyped-def]
        self.costs.append(step_time_s)
        super().observe(draft_counts, num_accepted, step_time_s)


def test_a_join_behind_a_held_launch_waits_for_none_and_no_cost_carries_it(monkeypatch):
    """A request joins in the step whose launch (round N+1) the launcher thread still holds:
    the step returns without waiting for it (the joiner's prefill is queued behind it). The
    next hand-off waits for it instead, and no observed cost carries that wait (the round
    the same step observes, N, least of all); none goes negative (stop 36's first accounting
    subtracted a join's wait)."""
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2)
    engine.depth_policy = policy = CostLog(max_depth=1, forced=0)
    prompts = mixed_prompts(2, seed=2)
    engine.add_request("a", prompts[0], SamplingParams(max_tokens=12))
    engine.step()  # a's prefill
    engine.step()  # a's first round launched
    held, release = hold_launches(monkeypatch)
    engine.add_request("b", prompts[1], SamplingParams(max_tokens=12))  # joins next step
    threading.Timer(1.0, release.set).start()
    t0 = time.perf_counter()
    engine.step()  # launches round N+1 (held), observes N, admits b
    assert held.is_set() and time.perf_counter() - t0 < 0.5, "the join waited for the held launch"
    assert [r.request_id for r in engine.rows] == ["a", "b"]
    observed = len(policy.costs)
    while engine.has_work():
        engine.step()
    assert observed >= 1 and min(policy.costs) > 0, policy.costs
    assert policy.costs[observed - 1] < 0.1, "the join's wait was charged to round N"
    assert max(policy.costs) < 0.2, "the join's 1 s wait was charged to a round"
