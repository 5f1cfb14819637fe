"""Adaptive draft depth: the policy (pure numpy) against simulated machines."""

from __future__ import annotations

import numpy as np
import pytest

from workers.depth_policy import DepthPolicy
from workers.round_costs import expected_tokens, fit_linear


class SimulatedMachine:
    """A machine with known round costs and per-position acceptance, noisy like a real one."""

    def __init__(self, verify, draft, accept, other=lambda B: 0.002 + 0.0001 * B, seed=0, jit=0.0):
        self.verify, self.draft, self.other = verify, draft, other
        self.jit, self.built = jit, set()  # first round of a shape pays `jit` seconds more
        self.accept = np.array(accept)
        self.rng = np.random.default_rng(seed)

    def true_rate(self, B, k):
        """Tokens/s of depth k, by Monte Carlo over the acceptance process (not the formula)."""
        runs = np.cumprod(self.rng.random((20000, k)) < self.accept[:k], axis=1).sum(1)
        tokens = B * (1 + runs.mean())
        return tokens / (self.draft(B, k) + self.verify(B, k + 1) + self.other(B))

    def round(self, policy, B):
        k = policy.choose(B)
        counts = np.full(B, k)
        hits = self.rng.random((B, k)) < self.accept[:k]
        accepted = np.cumprod(hits, axis=1).sum(1) if k else np.zeros(B, dtype=int)
        noise = self.rng.normal(1.0, 0.03)
        step = self.draft(B, k) + self.verify(B, k + 1) + self.other(B)
        spike = 0.0 if (B, k) in self.built else self.jit
        self.built.add((B, k))
        policy.observe(counts, accepted, step * noise + spike)
        return k


def draft_cost(fixed, per_step, per_row_step):
    return lambda B, k: (fixed + per_step * k + per_row_step * B * k) if k else 0.0


MACHINES = {
    # memory-bound: a wider verify costs almost nothing more -> draft deep
    "gpu-like": (
        lambda B, W: 0.010 + 0.00002 * B * W,
        draft_cost(0.001, 0.0008, 0.0),
        [0.8, 0.75, 0.7, 0.65],
    ),
    # compute-bound, expensive drafter, poor drafts -> no drafting
    "cpu-bad-drafts": (
        lambda B, W: 0.002 + 0.0015 * B * W,
        draft_cost(0.002, 0.004, 0.0001),
        [0.3, 0.2, 0.2, 0.2],
    ),
    # in between: some depth between 1 and max is best (by 15% at B=8, beyond min_gain)
    "middle": (
        lambda B, W: 0.004 + 0.0005 * B * W,
        draft_cost(0.001, 0.0005, 0.00002),
        [0.75, 0.6, 0.5, 0.4],
    ),
    # a drafter whose first step costs most (MTP folding the verify's hidden states in)
    "fixed-draft-cost": (
        lambda B, W: 0.012 + 0.0001 * B * W,
        draft_cost(0.002, 0.0013, 0.0),
        [0.75, 0.74, 0.64, 0.6],
    ),
}


@pytest.mark.parametrize("name", sorted(MACHINES))
@pytest.mark.parametrize("B", [1, 8])
@pytest.mark.parametrize("jit", [0.0, 0.04])
def test_policy_finds_a_near_best_depth_on_a_simulated_machine(name, B, jit):
    """jit: every new shape's first round costs 40 ms more (MLX CUDA builds kernels per shape)."""
    verify, draft, accept = MACHINES[name]
    machine = SimulatedMachine(verify, draft, accept, seed=B, jit=jit)
    policy = DepthPolicy(max_depth=4)
    for _ in range(200):
        machine.round(policy, B)
    rates = {k: machine.true_rate(B, k) for k in range(5)}
    chosen = [machine.round(policy, B) for _ in range(48)]
    # Exploration rounds aside, the choice is stable and within 5% of the best depth.
    picked = max(set(chosen), key=chosen.count)
    assert rates[picked] >= 0.95 * max(rates.values()), (name, B, picked, rates)


def test_policy_choices_differ_where_the_machines_differ():
    picks = {}
    for name, (verify, draft, accept) in MACHINES.items():
        machine, policy = SimulatedMachine(verify, draft, accept), DepthPolicy(max_depth=4)
        for _ in range(200):
            machine.round(policy, 8)
        policy.explore_every = 0
        picks[name] = policy.choose(8)
    assert picks["gpu-like"] == 4 and picks["cpu-bad-drafts"] == 0
    assert 0 < picks["middle"] < 4, picks


@pytest.mark.parametrize("B", [1, 8])
@pytest.mark.parametrize("jit", [0.0, 0.04])
def test_a_drafter_that_cannot_pay_costs_almost_nothing(B, jit):
    """A draft step costing 40 plain rounds (a 4-bit draft model on a CPU): the warm-up stops
    after depth 1, no deeper depth is ever tried blind, and exploration stays in budget."""
    plain = lambda B, W: 0.010 + 0.0002 * B * W  # noqa: E731
    machine = SimulatedMachine(
        plain, draft_cost(0.0, 0.4, 0.0), [0.7, 0.6, 0.5, 0.4], seed=B, jit=jit
    )
    policy = DepthPolicy(max_depth=4)
    picks = [machine.round(policy, B) for _ in range(2000)]
    assert picks[:2] == [0, 0] and max(picks[:20]) == 1, picks[:20]
    assert sum(k > 0 for k in picks[:20]) <= 2, "depth 1 is probed at most twice"
    assert max(picks) <= 1 or picks.index(max(picks)) > 200, "no blind deep round early"
    spent = sum(machine.draft(B, k) + plain(B, k + 1) + machine.other(B) for k in picks)
    ideal = len(picks) * (plain(B, 1) + machine.other(B))  # never drafting
    warm_up = 2 * (machine.draft(B, 1) + plain(B, 2))
    assert spent <= 1.03 * ideal + warm_up, (spent / ideal, picks.count(0))


def test_conditional_acceptance_is_estimated_per_position_with_ragged_depths():
    rng = np.random.default_rng(0)
    truth = np.array([0.8, 0.6, 0.5, 0.3])
    policy = DepthPolicy(max_depth=4, decay=1.0)
    for _ in range(3000):
        counts = rng.integers(0, 5, size=6)  # rows draft different depths
        hits = rng.random((6, 4)) < truth
        hits &= np.arange(4)[None, :] < counts[:, None]
        policy.observe(counts, np.cumprod(hits, axis=1).sum(1), 0.01)
    assert np.allclose(policy.acceptance(), truth, atol=0.03), policy.acceptance()


def test_exploration_visits_every_depth_and_pure_helpers():
    policy = DepthPolicy(max_depth=3, explore_every=4)
    seen = []
    for _ in range(4 * 8):
        k = policy.choose(2)
        seen.append(k)
        policy.observe(np.full(2, k), np.zeros(2, dtype=int), 0.01 + 0.001 * k)
    assert set(seen) == {0, 1, 2, 3}
    assert expected_tokens(np.array([0.5, 0.5]), 2) == pytest.approx(1.75)
    assert expected_tokens(np.array([0.5, 0.5]), 0) == 1.0
    x = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    assert fit_linear(x, np.array([3.0, 5.0, 7.0])) == pytest.approx([1.0, 2.0])
    assert fit_linear(np.zeros((0, 3)), np.zeros(0)).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="max_depth=0"):
        DepthPolicy(max_depth=0)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_policy_generalises_across_batch_sizes_it_rarely_saw(name):
    """Continuous batching: B changes every round; the fit covers sizes seen once or never
    (12: never, but its bucket, 8-15, was warmed up at 8)."""
    verify, draft, accept = MACHINES[name]
    machine = SimulatedMachine(verify, draft, accept, seed=3)
    policy = DepthPolicy(max_depth=4)
    for B in machine.rng.integers(1, 9, size=400):
        machine.round(policy, int(B))
    policy.explore_every = 0
    for B in (5, 12):
        rates = {k: machine.true_rate(B, k) for k in range(5)}
        picked = policy.choose(B)
        assert rates[picked] >= 0.9 * max(rates.values()), (name, B, picked, rates)


def test_a_thin_predicted_gain_keeps_the_policy_on_plain_decoding():
    """Where drafting gains less than min_gain (a compute-bound batch: a 2-token verify costs
    about twice a decode), the policy decodes plainly: that cannot lose, a noisy depth can."""
    verify = lambda B, W: 0.001 + 0.001 * B * W  # noqa: E731
    machine = SimulatedMachine(verify, draft_cost(0.0, 0.0002, 0.0), [0.85] * 4, seed=5)
    policy = DepthPolicy(max_depth=4)
    for _ in range(200):
        machine.round(policy, 16)
    policy.explore_every = 0
    rates = {k: machine.true_rate(16, k) for k in range(5)}
    assert max(rates.values()) < 1.05 * rates[0], rates  # the machine: no depth clearly pays
    assert policy.choose(16) == 0


def test_drafting_is_weighed_against_plain_measured_at_the_same_batch_size():
    """Rows arriving one by one: the warm-up runs at B <= 2, where drafting pays, then the batch
    fills to 16 on a compute-bound machine, where it does not. Seen on the CPU: plain at B = 16
    was only ever fitted from small-B rounds (24 ms predicted, 18 ms true) and depth 3 ran there
    at 0.7x plain's rate."""
    verify = lambda B, W: 0.002 + 0.001 * B * W  # noqa: E731
    machine = SimulatedMachine(verify, draft_cost(0.0005, 0.0005, 0.00001), [0.75] * 4, seed=2)
    policy = DepthPolicy(max_depth=3)
    sizes = [1] * 6 + [2] * 6 + [4] * 3 + [8] * 3 + [16] * 200
    picks = [(B, machine.round(policy, B)) for B in sizes]
    at_16 = [k for B, k in picks[-150:] if B == 16]
    rates = {k: machine.true_rate(16, k) for k in range(4)}
    assert max(rates, key=rates.get) == 0, rates  # the machine: plain is best at B = 16
    assert at_16.count(0) >= 0.9 * len(at_16), at_16
    assert any(k > 0 for B, k in picks if B == 1), "at B = 1 drafting pays and is used"


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_batch_size_bucket_warms_up_from_plain(name):
    """Continuous batching changes B all the time; in a bucket of sizes (1, 2-3, 4-7, ...)
    never seen, the policy measures plain first, then drafting, whatever a fit over other
    sizes predicts (seen on a GPU: a size with only a plain round was fitted too dear to draft
    and never tried it)."""
    verify, draft, accept = MACHINES[name]
    machine = SimulatedMachine(verify, draft, accept, seed=4)
    policy = DepthPolicy(max_depth=4)
    picks: dict[int, list[int]] = {}
    for B in machine.rng.integers(1, 33, size=600):
        picks.setdefault(int(B).bit_length(), []).append(machine.round(policy, int(B)))
    assert set(picks) == {1, 2, 3, 4, 5, 6}
    for bucket, ks in picks.items():
        assert ks[:2] == [0, 0], (bucket, ks[:8])
        assert ks[2] == 1 or len(ks) <= 2, (bucket, ks[:8])  # then depth 1 is measured


def test_a_compute_bound_batch_stops_the_warm_up_where_depth_one_fails():
    """B=16 on a compute-bound device (verify cost linear in B*W, as a 2-core CPU): depth 1
    measures below plain at the measured acceptance, and the linear growth of cost with depth
    rules out depths 2+ with every further draft accepted: they are not probed."""
    B = 16
    verify = lambda B, W: 0.004 + 0.001 * B * W  # noqa: E731
    machine = SimulatedMachine(verify, draft_cost(0.001, 0.0005, 0.0), [0.73] * 4, seed=3)
    assert machine.true_rate(B, 1) < machine.true_rate(B, 0)
    policy = DepthPolicy(max_depth=4)
    picks = [machine.round(policy, B) for _ in range(40)]
    assert picks[:4] == [0, 0, 1, 1] and max(picks[:40]) <= 1, picks
    # One row (two rounds tell little about acceptance): the ladder goes on as before.
    policy, machine = (
        DepthPolicy(max_depth=4),
        SimulatedMachine(verify, draft_cost(0.001, 0.0005, 0.0), [0.73] * 4, seed=3),
    )
    assert [machine.round(policy, 1) for _ in range(6)] == [0, 0, 1, 1, 2, 2]


def test_plain_decoding_is_measured_again_after_a_cold_start():
    """A fresh process's first rounds are slow (buffers, caches): the warm-up's first plain
    rounds cost 1.6x here. Measured only then, plain decoding would look dearer than depth 1,
    which loses on this compute-bound batch; the second plain measurement keeps depth 0."""
    B = 16
    verify = lambda B, W: 0.004 + 0.001 * B * W  # noqa: E731
    machine = SimulatedMachine(verify, draft_cost(0.001, 0.0005, 0.0), [0.73] * 4, seed=4)
    assert machine.true_rate(B, 1) < machine.true_rate(B, 0)
    policy = DepthPolicy(max_depth=4, explore_every=0)
    seen = 0
    orig = policy.observe

    def cold(counts, accepted, seconds):  # type: ignore[no-untyped-def]
        nonlocal seen
        seen += 1
        orig(counts, accepted, seconds * (1.6 if seen <= 2 else 1.0))

    policy.observe = cold  # type: ignore[method-assign]
    picks = [machine.round(policy, B) for _ in range(40)]
    assert picks[:4] == [0, 0, 1, 1] and picks[-20:] == [0] * 20, picks


def test_a_probe_without_its_plain_rerun_ends_at_the_deepest_depth():
    """`probe_rerun` off (MLX CUDA after its shapes are built, where each return to plain is a
    graph switch): the bucket's probe is plain twice and each depth twice, and then it is done,
    without the closing plain rounds."""
    rerun, no_rerun = DepthPolicy(max_depth=2), DepthPolicy(max_depth=2, probe_rerun=False)
    for policy in (rerun, no_rerun):
        picks = []
        for _ in range(8):
            k = policy._probe(4)
            picks.append(k)
            if k is not None:
                policy._count[(4, k)] = policy._count.get((4, k), 0) + 1
        policy.picks = picks  # type: ignore[attr-defined]
    assert rerun.picks == [0, 0, 1, 1, 2, 2, 0, 0]  # type: ignore[attr-defined]
    assert no_rerun.picks == [0, 0, 1, 1, 2, 2, None, None]  # type: ignore[attr-defined]


def test_a_gain_within_the_measurement_error_keeps_plain_decoding():
    """Depth 1 predicted 8% ahead of plain (what a contended 2-core CPU measured at B=16 for a
    depth whose true gain was nil) is not enough: drafting must clear min_gain (10%)."""
    verify = lambda B, W: 0.016 / 3 + 0.0005 * B * W  # noqa: E731
    # B=16: plain 13.3 ms; depth 1 costs 1.6x plain and accepts 0.73: 1.73 / 1.6 = 1.08
    machine = SimulatedMachine(verify, draft_cost(0.0, 0.0, 0.0), [0.73] * 4, seed=5)
    machine.other = lambda B: 0.0  # type: ignore[method-assign]
    policy = DepthPolicy(max_depth=1, explore_every=0)
    picks = [machine.round(policy, 16) for _ in range(200)]
    assert 1.04 < machine.true_rate(16, 1) / machine.true_rate(16, 0) < 1.10
    assert picks[-100:] == [0] * 100, picks


def test_settled_plain_only_after_the_warm_up_and_only_where_drafting_does_not_pay():
    """The engine skips what a joiner's drafter would only need for drafting (an MTP head's
    prompt pairs) where the policy has settled on plain decoding; never before the batch
    size's warm-up has measured it, and never where drafting pays."""
    for name, B, want in (("cpu-bad-drafts", 8, True), ("gpu-like", 8, False)):
        machine = SimulatedMachine(*MACHINES[name])
        policy = DepthPolicy(max_depth=4)
        assert not policy.settled_plain(B)  # nothing measured yet
        for _ in range(40):
            machine.round(policy, B)
        assert policy.settled_plain(B) is want, name
        assert not policy.settled_plain(1)  # a batch size never warmed up


def test_plain_rounds_only_forget_acceptance_evidence():
    """A round that drafted nothing adds no evidence (its host time is kept small: it is the
    round run where drafting does not pay); the evidence still fades per round."""
    policy = DepthPolicy(max_depth=3)
    for _ in range(5):
        policy.observe(np.full(4, 3), np.array([3, 2, 0, 1]), 0.01)
    before = (policy._tried.copy(), policy._hit.copy(), policy._drafted, policy._accepted)
    for _ in range(10):
        policy.observe(np.zeros(4, dtype=int), np.zeros(4, dtype=int), 0.005)
    fade = policy.decay**10
    assert policy._tried == pytest.approx(before[0] * fade)
    assert policy._hit == pytest.approx(before[1] * fade)
    assert (policy._drafted, policy._accepted) == pytest.approx(
        (before[2] * fade, before[3] * fade)
    )
    assert policy.acceptance() == pytest.approx(before[1] / before[0])  # the estimate holds


def test_the_policys_median_is_numpys():
    from workers.round_costs import median

    rng = np.random.default_rng(7)
    for n in range(1, 40):
        values = rng.exponential(0.003, n).tolist()
        assert median(values) == pytest.approx(float(np.median(values)), rel=1e-12)
    with pytest.raises(ValueError):
        median([])


def test_a_lone_row_priced_by_a_larger_batchs_cells_is_weighed_with_their_error():
    """H200 trace (trained hybrid, served traffic, bench/results/s37): 16-row rounds held
    steady (here plain ~2.3 ms, depth 3 ~4.6 ms, 3 tokens a row-round); the last row's own
    rounds were few and spread by joins and leaves. Its costs came from the 16-row cells
    (capped), but its margin from its own cells' error: 0.69 there, and it decoded plainly with
    depth 3 predicted 1.5x faster. Weighed with the error of the cells that price it, it drafts."""
    rng = np.random.default_rng(0)
    policy = DepthPolicy(max_depth=3, extremes_only=True, cap_by_larger=True, run=4)
    for k, base, n in ((0, 2.3e-3, 40), (3, 4.6e-3, 120)):
        for _ in range(n):
            policy.observe(np.full(16, k), np.full(16, 2 if k else 0), base * rng.normal(1, 0.03))
    for k, ms in ((0, [4.0, 2.0, 2.4, 4.0, 7.0, 8.0]), (3, [7.0, 3.5, 4.2, 7.0, 12.25, 14.0])):
        for t in ms:  # the first of a shape counts as its build: five rounds each, MAD 50%
            policy.observe(np.full(1, k), np.full(1, 2 if k else 0), t / 1e3)
    own = 2 * np.hypot(policy._median_error(1, 0), policy._median_error(1, 3))
    assert own > 0.6, own  # the trace's case: the lone row's own cells are noisy
    assert policy._margin(1, 3) < 0.15
    rates = policy._rates(1)
    assert rates[3] > (1 + policy._margin(1, 3)) * rates[0] > 0
    assert rates[3] < (1 + own) * rates[0], "the case must be one the old margin refused"


def test_a_capping_cell_too_new_to_know_its_error_leaves_the_rows_own():
    """A cell of fewer than LIVE_ROUNDS live rounds has no error yet (0): where it caps a
    noisy size, that size's own error stands, or one lucky round would drop the margin to
    min_gain."""
    policy = DepthPolicy(max_depth=3, extremes_only=True, cap_by_larger=True, run=4)
    for k, ms in ((0, [2.3, 2.3, 2.3]), (3, [4.6, 4.6, 4.6])):
        for t in ms:  # the first of a shape is its build: two live rounds each
            policy.observe(np.full(16, k), np.full(16, 2 if k else 0), t / 1e3)
    for k, ms in ((0, [4.0, 2.0, 2.4, 4.0, 7.0, 8.0]), (3, [7.0, 3.5, 4.2, 7.0, 12.25, 14.0])):
        for t in ms:
            policy.observe(np.full(1, k), np.full(1, 2 if k else 0), t / 1e3)
    own = 2 * np.hypot(policy._median_error(1, 0), policy._median_error(1, 3))
    assert policy.round_costs(1)[3] == pytest.approx(4.6e-3)  # capped by the new cell ...
    assert policy._margin(1, 3) == pytest.approx(own) and own > 0.6  # ... not weighed by it
