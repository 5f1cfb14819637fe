"""Joins held so that waiting requests join a running batch several at a time
(workers/join_gate.py): the gate's price and rent on their own, then an engine whose joins it
holds, every row's tokens mlx-lm's and no request held past the cap."""

from __future__ import annotations

import pytest

from tests.tiny import mixed_prompts, perturbed, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.config import EngineConfig
from workers.drafters.model import ModelDrafter
from workers.join_gate import JoinGate

STEADY = 0.004  # seconds a step without a prefill


def taught(fixed_s: float, per_token_s: float, runs: int = 8) -> JoinGate:
    """A gate shown steady steps and join runs of one prefill step and the step after it,
    whose extra seconds are `fixed_s` plus `per_token_s` a prompt token."""
    gate = JoinGate(max_wait_steps=8)
    for _ in range(10):
        gate.observe_step(STEADY, False, 0)
    for i in range(runs):
        tokens = 50 + 40 * i
        gate.observe_step(STEADY + fixed_s + per_token_s * tokens, True, tokens)
        gate.observe_step(STEADY, False, 0)  # the step after the join carries none of it here
        for _ in range(3):
            gate.observe_step(STEADY, False, 0)
    return gate


def test_a_gate_without_evidence_joins_at_once() -> None:
    gate = JoinGate(max_wait_steps=8)
    assert gate.price_s() == 0.0
    assert gate.should_join(running=15, free=1, waiting=9)
    gate = taught(0.005, 1e-5, runs=3)  # under min_samples
    assert gate.price_s() == 0.0 and gate.should_join(running=15, free=1, waiting=9)


def test_the_price_is_a_joins_fixed_part_not_its_tokens() -> None:
    gate = taught(fixed_s=0.005, per_token_s=2e-5)
    assert gate.price_s() == pytest.approx(0.005, rel=0.02)
    # All of a join's seconds per token (a compute-bound CPU prefill): nothing to save.
    assert taught(fixed_s=0.0, per_token_s=1e-4).price_s() == pytest.approx(0.0, abs=1e-6)


def test_a_join_that_paid_a_build_does_not_drag_the_price() -> None:
    """MLX CUDA builds a graph for a prefill shape it never ran: 70-84 ms against 2-5 ms
    joins in stop 57's H200 trace. One such join moves a least-squares line's intercept to
    0; the robust fit keeps the fixed part."""
    gate = taught(fixed_s=0.004, per_token_s=1e-6)
    gate.observe_step(STEADY + 0.08, True, 540)
    gate.observe_step(STEADY, False, 0)
    assert gate.price_s() == pytest.approx(0.004, rel=0.1)


def test_the_step_after_a_join_counts_toward_its_cost() -> None:
    """A pipelined round launched behind a join pays part of it: the run's extra is the join
    step's and the next step's seconds over two steady steps."""
    gate = JoinGate(max_wait_steps=8)
    for _ in range(10):
        gate.observe_step(STEADY, False, 0)
    for i in range(6):
        gate.observe_step(STEADY + 0.001, True, 100 + 50 * i)
        gate.observe_step(STEADY + 0.003, False, 0)  # 3 of the join's 4 ms land here
    assert gate.price_s() == pytest.approx(0.004, rel=0.02)


def test_joins_back_to_back_are_priced_one_by_one() -> None:
    """Two joins in consecutive steps make one run of prefill steps: each is priced at the
    run's mean, not as one join with twice the fixed part."""
    gate = JoinGate(max_wait_steps=8)
    for _ in range(10):
        gate.observe_step(STEADY, False, 0)
    fixed, per_token = 0.004, 1e-5
    for i in range(8):
        tokens = [100 + 20 * i] if i % 2 else [60 + 10 * i, 60 + 10 * i]  # one join, or two
        for t in tokens:
            gate.observe_step(STEADY + fixed + per_token * t, True, t, started=1)
        gate.observe_step(STEADY, False, 0)
    assert gate.price_s() == pytest.approx(fixed, rel=0.05)


def test_holds_until_the_idle_slots_rent_pays_the_price() -> None:
    gate = taught(fixed_s=0.004, per_token_s=0.0)  # price 4 ms; a steady step 4 ms
    # 4 ready beside 12 running: each held step idles a quarter of a step, 1 ms.
    decisions = [gate.should_join(running=12, free=4, waiting=9) for _ in range(6)]
    assert decisions == [False, False, False, False, True, False]  # then the next joiners wait
    gate.should_join(running=15, free=0, waiting=9)  # nobody waits: a new wait starts from nothing
    # One ready beside 15: 0.25 ms a step would need 16 steps; the cap (8) ends the wait.
    decisions = [gate.should_join(running=15, free=1, waiting=9) for _ in range(9)]
    assert decisions == [False] * 8 + [True]


def test_an_empty_batch_or_a_gate_turned_off_joins_at_once() -> None:
    gate = taught(fixed_s=0.004, per_token_s=0.0)
    assert gate.should_join(running=0, free=3, waiting=9)
    off = taught(fixed_s=0.004, per_token_s=0.0)
    off.max_wait_steps = 0
    assert off.should_join(running=15, free=1, waiting=9)
    assert not gate.should_join(running=15, free=0, waiting=9)  # nothing to join


def test_requests_that_all_fit_now_join_at_once() -> None:
    """Holding gains only where a slot freeing brings another row into the same join: with
    every waiting request fitting now, a served worker's first token would pay for nothing."""
    gate = taught(fixed_s=0.004, per_token_s=0.0)
    assert gate.should_join(running=15, free=1, waiting=1)
    assert gate.should_join(running=4, free=12, waiting=3)
    assert not gate.should_join(running=15, free=1, waiting=2)


def test_bad_wait_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="join_wait_steps=-1"):
        EngineConfig(join_wait_steps=-1)
    with pytest.raises(ValueError, match="max_wait_steps=-2"):
        JoinGate(max_wait_steps=-2)


@pytest.mark.parametrize("speculative", [False, True])
def test_held_joins_come_fewer_match_the_reference_and_wait_at_most_the_cap(speculative):
    """Requests queue behind a batch of 3 whose rows finish a step or so apart. With the gate
    priced high (every join worth holding) each joiner waits until the cap or until several
    slots are free: no prefill starts in a step the gate held, fewer joins than with the gate
    off, no joiner held more than the cap's steps, and every row's tokens mlx-lm's."""
    target = tiny_model("qwen3", seed=5, layers=2)
    prompts = mixed_prompts(9, seed=3, lengths=[12] * 9)  # one length: joiners prefill together
    budgets = [4 + i for i in range(len(prompts))]  # rows finish a step or so apart
    cap = 3

    def run(wait_steps: int) -> tuple[dict[str, list[int]], int, int]:
        drafter = ModelDrafter(perturbed(target, scale=0.1)) if speculative else None
        engine = Engine(
            target, drafter=drafter, max_batch_size=3, draft_depth=2, join_wait_steps=wait_steps
        )
        gate = engine.join_gate
        gate.price_s = lambda: 1.0  # type: ignore[method-assign]
        decisions: list[tuple[bool, bool]] = []  # (joined, anyone ready) per gate call
        real = gate.should_join

        def should_join(running: int, free: int, waiting: int) -> bool:
            decisions.append((real(running, free, waiting), min(free, waiting) > 0))
            return decisions[-1][0]

        gate.should_join = should_join  # type: ignore[method-assign]
        for i, (p, n) in enumerate(zip(prompts, budgets)):
            engine.add_request(f"r{i}", p, SamplingParams(max_tokens=n))
        tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
        longest = held = 0
        while engine.has_work():
            seen, rows = len(decisions), {r.request_id for r in engine.rows}
            for ev in engine.step():
                tokens[ev.request_id] += ev.new_tokens
            if decisions[seen:] == [(False, True)]:  # held: nothing prefilled, nobody joined
                assert engine._prefill is None
                assert {r.request_id for r in engine.rows} <= rows
                held += 1
                longest = max(longest, held)
            elif any(joined for joined, _ in decisions[seen:]):
                held = 0
        return tokens, sum(joined for joined, _ in decisions), longest

    gated, gated_joins, longest = run(cap)
    at_once, joins_at_once, none_held = run(0)
    assert none_held == 0
    assert 0 < longest <= cap
    assert gated_joins < joins_at_once, (gated_joins, joins_at_once)
    for i, (p, n) in enumerate(zip(prompts, budgets)):
        reference = reference_greedy(target, p, n)
        assert_matches(gated[f"r{i}"], reference, f"row {i}, gated")
        assert_matches(at_once[f"r{i}"], reference, f"row {i}, at once")


def test_rows_a_length_group_left_behind_follow_at_once() -> None:
    gate = taught(fixed_s=0.004, per_token_s=0.0)
    assert [gate.should_join(running=10, free=4, waiting=9) for _ in range(5)][-1]
    gate.follow_up()  # the join took one length group; the other ready rows were held already
    assert gate.should_join(running=12, free=2, waiting=7)
    assert not gate.should_join(running=13, free=1, waiting=6)  # a new slot: held again
