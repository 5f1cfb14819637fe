"""The depth policy where each new round shape is a graph build (MLX CUDA): only plain and
the deepest depth, builds and switches charged, compile rounds set aside, depths held for runs,
shapes built before traffic (the simulated machines are test_depth_policy.py's)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.workers.engine.test_depth_policy import MACHINES, SimulatedMachine
from workers.depth_policy import DepthPolicy


class SwitchingMachine(SimulatedMachine):
    """A machine where a round whose depth differs from the last one's costs `penalty` more
    (MLX CUDA rebuilding the round's graph: ~15-30 ms on an H200)."""

    def __init__(self, *args, penalty=0.0, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.penalty, self.last, self.changes, self.tokens, self.seconds = penalty, None, 0, 0, 0.0

    def round(self, policy, B):
        k = policy.choose(B)
        hits = self.rng.random((B, k)) < self.accept[:k]
        accepted = np.cumprod(hits, axis=1).sum(1) if k else np.zeros(B, dtype=int)
        step = (self.draft(B, k) + self.verify(B, k + 1) + self.other(B)) * self.rng.normal(1, 0.03)
        if self.last is not None and k != self.last:
            step += self.penalty
            self.changes += 1
        self.last = k
        self.tokens += int(B + accepted.sum())
        self.seconds += step
        policy.observe(np.full(B, k), accepted, step)
        return k


def test_where_every_drafting_round_is_one_graph_only_plain_and_max_depth_are_used():
    """On MLX CUDA drafts are padded to draft_depth, so depth 1 costs what depth 4 costs:
    probing, exploring or choosing a depth in between only drafts less for the same time."""
    machine = SwitchingMachine(*MACHINES["gpu-like"])
    policy = DepthPolicy(max_depth=4, extremes_only=True)
    chosen = [machine.round(policy, 8) for _ in range(400)]
    assert set(chosen) == {0, 4}, sorted(set(chosen))
    assert chosen[-50:].count(4) >= 45  # drafting pays on this machine
    # Past the warm-up, plain rounds are explorations: every (max_depth + 1) * explore_every
    # rounds at most, as often as with every depth in the cycle (a graph switch each).
    assert chosen[20:].count(0) <= 380 // (5 * policy.explore_every) + 1, chosen
    assert not DepthPolicy(max_depth=4).extremes_only  # elsewhere every depth is measured


def test_exploring_another_depth_is_charged_the_switches_it_costs():
    """A change of depth that rebuilds the round's graph costs ~3 rounds here; exploring one
    costs two such changes (there and back) on top of its own rounds, so the policy explores
    far less than where switching is free, and emits more tokens per second for it."""
    runs = {}
    for priced in (True, False):
        machine = SwitchingMachine(*MACHINES["gpu-like"], penalty=0.03, seed=1)
        policy = DepthPolicy(max_depth=4, extremes_only=True)
        if not priced:
            policy.switch_cost = lambda: 0.0  # type: ignore[method-assign]
        for _ in range(600):
            machine.round(policy, 8)
        runs[priced] = (machine.changes, machine.tokens / machine.seconds)
    assert runs[True][0] <= 5 and runs[False][0] >= 10, runs
    assert runs[True][1] > 1.02 * runs[False][1], runs


def test_exploring_a_shape_never_run_is_charged_its_build():
    """A batch draining from 32 rows to 1 meets a new batch size every few rounds; on MLX
    CUDA each new (rows, depth) shape's first round builds its graph (~30 ms here). Exploring
    the other depth at a new size pays that build, measured from shapes' first rounds: priced
    so, the policy builds fewer shapes and emits more tokens per second."""
    runs = {}
    for priced in (True, False):
        machine = SimulatedMachine(*MACHINES["gpu-like"], jit=0.03)
        policy = DepthPolicy(max_depth=4, extremes_only=True)
        if not priced:
            policy.build_cost = lambda: 0.0  # type: ignore[method-assign]
        tokens, seconds = 0, 0.0
        for i in range(640):
            B = max(1, 32 - i // 20)
            k = policy.choose(B)
            hits = machine.rng.random((B, k)) < machine.accept[:k]
            accepted = np.cumprod(hits, axis=1).sum(1) if k else np.zeros(B, dtype=int)
            step = machine.draft(B, k) + machine.verify(B, k + 1) + machine.other(B)
            step += 0.0 if (B, k) in machine.built else machine.jit
            machine.built.add((B, k))
            policy.observe(np.full(B, k), accepted, step)
            tokens, seconds = tokens + B + int(accepted.sum()), seconds + step
        runs[priced] = (len(machine.built), tokens / seconds)
    # Priced: 32 sizes at depth 4 plus the buckets' warm-ups at depth 0, nothing explored.
    assert runs[True][0] <= 42 < 45 <= runs[False][0], runs
    assert runs[True][1] > 1.01 * runs[False][1], runs


def test_rounds_that_pay_a_compile_do_not_set_their_depths_cost():
    """On MLX CUDA a depth's first rounds may compile kernels and head traces for new spans:
    seconds, against rounds of milliseconds (H200, B=1: 1.7 and 2.4 s against 2.5 ms plain
    rounds). Taken as that depth's cost, the policy never drafted where drafting paid 1.4x;
    set aside as one-offs, the depth is measured again and chosen."""
    verify, draft, accept = MACHINES["gpu-like"]
    machine = SimulatedMachine(verify, draft, accept, seed=3)
    policy = DepthPolicy(max_depth=4, extremes_only=True, one_off_max=3)  # as on MLX CUDA
    compiles = {4: [2.0, 1.5]}  # depth 4's first two rounds compile
    chosen = []
    for _ in range(300):
        k = policy.choose(1)
        hits = machine.rng.random((1, k)) < machine.accept[:k]
        accepted = np.cumprod(hits, axis=1).sum(1) if k else np.zeros(1, dtype=int)
        step = machine.draft(1, k) + machine.verify(1, k + 1) + machine.other(1)
        step += compiles.get(k, [0.0]).pop(0) if compiles.get(k) else 0.0
        policy.observe(np.full(1, k), accepted, step)
        chosen.append(k)
    assert machine.true_rate(1, 4) > 1.5 * machine.true_rate(1, 0)  # drafting pays here
    assert chosen[-100:].count(4) >= 90, chosen[-100:]
    assert policy.round_costs(1)[4] < 0.05  # its cost is its rounds', not the compiles'


def test_explored_depths_are_held_for_runs_and_measured_without_their_switch():
    """MLX CUDA (H200, trained hybrid, B=8): a depth-3 round held costs 4.6 ms against 2.5 ms
    plain, but the first round after a change of depth carries the other depth's pipelined
    tail and a graph rebuild (8.6-11.8 ms measured). Explored one round at a time, every depth-3
    round is such a round and its cost reads 2x too high, so drafting was never chosen. With
    `run`, exploration holds a depth for that many rounds, and a run's first round is measured
    as a switch, not as the depth."""
    rng = np.random.default_rng(5)
    policy = DepthPolicy(max_depth=3, extremes_only=True, run=2, explore_budget=1.0)
    chosen, last = [], -1
    for _ in range(300):
        k = policy.choose(8)
        accepted = np.zeros(8, dtype=int)  # drafts never accepted: plain is chosen between
        seconds = (0.0046 if k else 0.0025) * rng.normal(1.0, 0.02)
        seconds += 0.006 if last not in (-1, k) else 0.0  # the switch
        policy.observe(np.full(8, k), accepted, seconds)
        chosen.append(k)
        last = k
    runs = [len(list(g)) for k, g in itertools.groupby(chosen[20:-4]) if k == 3]
    assert len(runs) >= 4 and set(runs) == {2}, runs  # explored, always for whole runs
    assert policy.round_costs(8)[3] == pytest.approx(0.0046, rel=0.05)
    assert policy.switch_cost() == pytest.approx(0.006, rel=0.2)


def test_shapes_built_before_traffic_set_no_build_cost():
    """After a build-only warm-up the policy knows its shapes as built (`forget_rounds`): their
    first live rounds are ordinary rounds, not builds. Counted as builds, they put ~0 s into
    the build-cost median, and a shape never built was then charged nothing."""
    policy = DepthPolicy(max_depth=3, extremes_only=True, run=4)
    policy.forced = 3
    for _ in range(3):  # a never-built shape: its first round pays a 40 ms build
        policy.observe(np.full(2, 3), np.full(2, 2), 0.045 if (2, 3) not in policy._seen else 0.005)
    policy.forced = 0
    for _ in range(3):
        policy.observe(
            np.zeros(1, dtype=int),
            np.zeros(1, dtype=int),
            0.04 if (1, 0) not in policy._seen else 0.003,
        )
    assert policy.build_cost() == pytest.approx(0.038, abs=0.002)
    policy._seen |= {(b, k) for b in range(3, 9) for k in (0, 3)}  # built by the warm-up
    for b in range(3, 9):
        policy.forced = 0
        for _ in range(2):  # built already: no build, two ordinary rounds
            policy.observe(np.zeros(b, dtype=int), np.zeros(b, dtype=int), 0.003)
    assert policy.build_cost() == pytest.approx(0.038, abs=0.002)  # still what builds cost


def _phases(
    hold: bool,
    accepts: list[float],
    rounds: int = 1000,
    explore: int = 16,
    sizes: list[int] | None = None,
    live_probes: bool = True,
) -> list[list[int]]:
    """Depths chosen over phases of `rounds` rounds each (acceptance evidence decays by 0.995 a
    round: 1000 rounds forget a phase), at the phase's batch size (`sizes`, else 8), every row
    accepting each draft position with the phase's probability; plain rounds cost 10 ms and
    depth-4 rounds 20 ms at any size. As on MLX CUDA: plain and depth 4 only, held for runs
    of 4 rounds."""
    rng = np.random.default_rng(7)
    policy = DepthPolicy(max_depth=4, extremes_only=True, hold_depth=hold, explore_every=explore,
                         run=4, live_probes=live_probes)  # fmt: skip
    picks: list[list[int]] = []
    for p, B in zip(accepts, sizes or [8] * len(accepts), strict=True):
        picks.append([])
        for _ in range(rounds):
            k = policy.choose(B)
            hits = rng.random((B, k)) < p
            accepted = np.cumprod(hits, axis=1).sum(1) if k else np.zeros(B, dtype=int)
            policy.observe(np.full(B, k), accepted, 0.020 if k else 0.010)
            picks[-1].append(k)
    return picks


def test_a_held_depth_is_kept_while_no_slower_than_plain_and_left_when_it_loses():
    """Where a switch rebuilds graphs (`hold_depth`, MLX CUDA) the margin guards the start of
    drafting only. Acceptance 0.9 (depth 4: 2.05x plain) starts drafting; at 0.55 (1.05x, under
    min_gain) the held depth is kept, where the policy without hold_depth decodes plainly and
    switches; at 0.4 (0.82x) both decode plainly: holding never keeps a depth that loses."""
    held = _phases(True, [0.9, 0.55, 0.4], explore=0)
    free = _phases(False, [0.9, 0.55, 0.4], explore=0)
    assert held[0][-100:] == [4] * 100 and free[0][-100:] == [4] * 100
    assert held[1][-100:] == [4] * 100, held[1]
    assert free[1][-100:] == [0] * 100, free[1]
    assert held[2][-100:] == [0] * 100 and free[2][-100:] == [0] * 100, held[2]


def test_without_live_probes_exploration_alone_finds_where_drafting_pays_and_where_not():
    """MLX CUDA's policy probes no bucket on traffic (`live_probes` off: each probe is a run
    of graph switches there) and learns from its choices and explorations: depth 4 where it
    pays 2x (acceptance 0.9), plain where it loses (0.4), as the probing policy does. A
    bucket first met (size 8, then 2) costs two switches (the size's first fresh choice is
    plain, priced by the fit, then depth 4) where a probe ladder (plain, depth 4, plain again,
    then the choice) costs four."""
    lean = _phases(True, [0.9, 0.4], live_probes=False)
    probing = _phases(True, [0.9, 0.4])
    assert lean[0][-100:] == [4] * 100 == probing[0][-100:], lean[0]
    assert lean[1][-100:].count(0) >= 90 and probing[1][-100:].count(0) >= 90, lean[1]

    def switches(picks: list[int]) -> int:
        return sum(a != b for a, b in zip(picks, picks[1:]))

    fresh = _phases(True, [0.9, 0.9], rounds=300, sizes=[8, 2], live_probes=False)
    probed = _phases(True, [0.9, 0.9], rounds=300, sizes=[8, 2])
    for picks in (fresh, probed):  # both draft at size 8 when size 2 starts, and end drafting
        assert picks[0][-1] == 4 and picks[1][-100:] == [4] * 100, picks[1][:60]
    assert switches(fresh[0][-1:] + fresh[1][:60]) == 2, fresh[1][:60]
    assert switches(probed[0][-1:] + probed[1][:60]) == 4, probed[1][:60]


def test_without_the_job_end_rule_the_job_is_never_viewed():
    """MLX CUDA's policy (`job_end` off) chooses by tokens per second throughout: the engine's
    job view, which costs O(B + W) reads and drives the drain choice, is never asked for."""
    asked = []
    for job_end in (True, False):
        p = DepthPolicy(max_depth=4, extremes_only=True, job_end=job_end, live_probes=False,
                        job_view=lambda on=job_end: asked.append(on))  # fmt: skip
        for _ in range(40):
            k = p.choose(8)
            p.observe(np.full(8, k), np.full(8, k), 0.020 if k else 0.010)
    assert asked and set(asked) == {True}


def test_a_held_depth_explores_plain_only_where_that_could_change_the_choice():
    """Exploring plain from a depth that pays 2x costs two switches (on the H200 the rounds
    next to one read 18-25 ms against 2-4 ms) and cannot change the choice: with `hold_depth`
    none is run; without it, runs of 4 as the exploration budget allows. From plain,
    drafting is still explored (plain rounds teach no acceptance)."""
    held = _phases(True, [0.9])[0]
    free = _phases(False, [0.9])[0]
    assert held[100:].count(0) == 0, held
    assert free[100:].count(0) >= 8, free  # runs of 4, as the exploration budget allows
    from_plain = _phases(True, [0.4])[0]  # plain chosen: drafting explored
    assert from_plain[100:].count(4) >= 8, from_plain


def test_the_depth_held_is_the_engines_whichever_batch_size_chose_it():
    """A batch size's own last choice can be stale: 7 rows chose plain (acceptance 0.4), then 8
    rows drafted (0.9) and kept drafting at a thin gain (0.55, 1.05x plain, once the 0.9
    evidence has decayed). When the batch is 7 rows again, depth 4 is the depth the engine
    holds, and it is kept; read from 7 rows' stale plain choice, drafting would have to
    clear the margin again and the batch would decode plainly (no exploration here)."""
    held = _phases(True, [0.4, 0.9, 0.55, 0.55], explore=0, sizes=[7, 8, 8, 7])
    assert held[0][-100:] == [0] * 100 and held[1][-100:] == [4] * 100
    assert held[2][-100:] == [4] * 100, held[2]
    assert held[3][:100] == [4] * 100 and held[3][-100:] == [4] * 100, held[3]


class CappedMachine(SwitchingMachine):
    """Rows draft at most `cap` deep whatever the policy allows (max_verify_tokens at a large
    batch, workers/drafting.py `row_depths`); the round is still the deepest graph."""

    def __init__(self, *args, cap=3, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.cap = cap

    def round(self, policy, B):
        k = policy.choose(B)
        drafted = min(k, self.cap)
        step = (self.draft(B, k) + self.verify(B, k + 1) + self.other(B)) * self.rng.normal(1, 0.03)
        policy.observe(np.full(B, drafted), np.zeros(B, dtype=int), step)  # nothing accepted
        return k


def test_rounds_capped_below_max_depth_finish_the_probe_as_max_rounds():
    """With drafts capped under max_depth (a 64-token verify at B = 16 and depth 4), every
    drafting round is still the max round's graph: it is measured as max, so the bucket's probe
    ends and a drafter that never pays is left for plain decoding. Filed under the capped
    count, the probe asked for max forever (found in review, stop 58)."""
    verify, draft, _ = MACHINES["gpu-like"]
    machine = CappedMachine(verify, draft, [0.0] * 4, seed=2, cap=3)
    policy = DepthPolicy(max_depth=4, extremes_only=True, run=4, explore_every=0)
    picks = [machine.round(policy, 16) for _ in range(60)]
    assert (16).bit_length() in policy._probed, picks[:20]
    assert picks[-20:] == [0] * 20, picks
