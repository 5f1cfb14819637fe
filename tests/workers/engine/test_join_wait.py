"""Joins that wait for several free slots (workers/join_wait.py): the ski-rental rule alone,
and an engine whose rows join fewer times with tokens unchanged."""

from __future__ import annotations

import pytest

from tests.tiny import reference_greedy
from tests.workers.engine.test_parity import assert_matches
from tests.workers.engine.test_pipeline import setup  # noqa: F401 (fixture)
from workers import Engine, SamplingParams
from workers.drafters.mtp import MTPDrafter
from workers.join_wait import MIN_STEPS, JoinWait


def test_rows_join_once_the_idle_slots_have_lost_one_joins_fixed_overhead():
    """Join steps cost 5 ms plus 10 us a prompt token against a 2 ms decode step: 3 ms of
    fixed overhead. A free slot of 4 rows loses a quarter of a 2 ms step a step, so a lone free
    slot waits 6 steps and two free slots 3; off, with nothing running, or before the overhead
    is measured, rows join at once. Where a join costs only its tokens (a CPU), none wait."""
    wait = JoinWait(enabled=True)
    assert wait.may_join(running=4, free=1)  # nothing measured: at once
    for i in range(MIN_STEPS):
        wait.observe(0.002, 0.0, 0, rows=4, idle_slots=0)
        tokens = 100 * (i + 1)
        wait.observe(0.005 + 1e-5 * tokens, 0.004, tokens, rows=4, idle_slots=0)
    assert wait.overhead() == pytest.approx(0.003)
    for slots, steps in ((1, 6), (2, 3)):
        waited = 0
        while not wait.may_join(running=4, free=slots):
            wait.observe(0.002, 0.0, 0, rows=4, idle_slots=slots)
            waited += 1
        assert waited == steps, (slots, waited)
        wait.observe(0.006, 0.004, 100, rows=4, idle_slots=0)  # the join resets it
        assert not wait.may_join(running=4, free=slots)
    assert wait.may_join(running=0, free=4)  # an empty batch never waits
    assert JoinWait(enabled=False, _idle=-1.0).may_join(running=4, free=1)
    cpu = JoinWait(enabled=True)  # a decode step plus 20 us a prompt token: no fixed part
    for i in range(MIN_STEPS):
        cpu.observe(0.010, 0.0, 0, rows=4, idle_slots=0)
        tokens = 100 * (i + 1)
        cpu.observe(0.010 + 2e-5 * tokens, 2e-5 * tokens, tokens, rows=4, idle_slots=0)
    assert cpu.overhead() == pytest.approx(0.0, abs=1e-9) and cpu.may_join(running=4, free=1)


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_waiting_joins_refill_several_slots_at_once_with_the_same_tokens(setup, drafter):  # noqa: F811
    """Rows of different lengths finish apart; with joins waiting (an overhead no idle slot
    reaches, so rows join only into an empty batch) the engine joins fewer times, and every
    row's tokens still match mlx-lm-style single-sequence greedy decoding."""
    target, head, prompts, _ = setup
    lengths = [6 + 5 * (i % 3) for i in range(len(prompts))]
    joins, got = {}, {}
    for wait in (False, True):
        d = MTPDrafter(target, head) if drafter == "mtp" else None
        engine = Engine(target, drafter=d, draft_depth=3, max_batch_size=3, join_wait=wait)
        if wait:
            engine.join_wait.overhead = lambda: 1e9  # type: ignore[method-assign]
        for i, p in enumerate(prompts):
            engine.add_request(f"r{i}", p, SamplingParams(max_tokens=lengths[i]))
        out: dict[str, list[int]] = {}
        n = 0
        while engine.has_work():
            for ev in engine.step():
                out.setdefault(ev.request_id, []).extend(ev.new_tokens)
            n += sum(1 for s in engine.take_round_stats() if s.num_prefill_tokens)
        joins[wait], got[wait] = n, out
    assert joins[True] < joins[False], joins
    for i, p in enumerate(prompts):
        ref = reference_greedy(target, p, lengths[i])
        assert_matches(got[True][f"r{i}"], ref, f"{drafter} row {i} (joins waiting)")
