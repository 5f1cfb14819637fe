"""The end of a job (workers/drain.py): its arithmetic against direct simulation, and the depth
policy choosing by when the rows finish, judged by simulated jobs' times."""

from __future__ import annotations

import numpy as np
import pytest

from workers.depth_policy import DepthPolicy
from workers.drain import (
    DrainingRows,
    JobCosts,
    accept_scale,
    drain_seconds,
    job_depth,
    job_seconds,
    population_scales,
    rows_expected_tokens,
)
from workers.round_costs import expected_tokens


def test_drain_seconds_equals_running_the_rounds_one_by_one():
    rng = np.random.default_rng(0)
    for _ in range(50):
        B = int(rng.integers(1, 12))
        rounds = rng.integers(1, 40, B)
        cost = np.concatenate([[0.0], rng.uniform(1.0, 5.0, B)])  # [B + 1]
        left, total = rounds.copy(), 0.0
        while (left > 0).any():  # the batch as it runs: every live row spends one round
            total += cost[int((left > 0).sum())]
            left -= 1
        assert drain_seconds(rounds.astype(float), cost) == pytest.approx(total)


def test_rows_expected_tokens_match_the_acceptance_process():
    """Tokens per round by Monte Carlo over per-position conditional acceptance (scaled per
    row), against the closed form; scale 1 is the policy's own `expected_tokens`."""
    rng = np.random.default_rng(1)
    cond, scale = np.array([0.8, 0.7, 0.6]), np.array([1.0, 0.5, 1.2])
    got = rows_expected_tokens(cond, scale, 3)
    for r, s in enumerate(scale):
        p = np.clip(cond * s, 0, 0.99)
        runs = np.cumprod(rng.random((200_000, 3)) < p, axis=1).sum(1)
        assert got[r] == pytest.approx(1 + runs.mean(), abs=0.01)
    assert got[0] == pytest.approx(expected_tokens(cond, 3))
    assert (rows_expected_tokens(cond, scale, 0) == 1).all()


def test_accept_scale_is_each_rows_acceptance_over_the_reference_shrunk_by_its_evidence():
    drafted = np.array([300.0, 300.0, 3.0])
    accepted = np.array([180.0, 45.0, 0.0])
    scale = accept_scale(drafted, accepted, prior=12.0, reference=0.6)
    assert scale[0] == pytest.approx(1.0)  # accepts as the reference rows did
    assert scale[1] < 0.3  # 0.15 against 0.6, barely shrunk over 300 drafts
    assert 0.75 < scale[2] < 1.0  # three drafts, none accepted: mostly the reference
    alone = accept_scale(drafted[1:2], accepted[1:2], prior=12.0, reference=0.6)
    assert alone[0] == pytest.approx(scale[1])  # a slow row left alone still reads as slow
    based = accept_scale(drafted, accepted, 12.0, 0.6, base=np.array([1.0, 1.0, 0.5]))
    assert based[2] == pytest.approx(0.4) and based[1] == pytest.approx(scale[1], rel=0.05)
    assert (accept_scale(np.zeros(3), np.zeros(3), 12.0, reference=0.0) == 1).all()


def test_population_scales_are_the_finished_rows_quantiles_spread_over_the_rows():
    rates = np.linspace(0.2, 0.8, 61)  # finished rows' accepted over drafted
    four = population_scales(rates, reference=0.5, n=4)
    expected = np.quantile(rates / 0.5, [0.125, 0.375, 0.625, 0.875])
    assert sorted(four) == pytest.approx(expected)
    assert list(four) != sorted(four)  # not the slowest first
    assert population_scales(rates, 0.5, 1) == pytest.approx([1.0])  # the median row
    assert (population_scales(rates[:3], 0.5, 5) == 1).all()  # too few rows to tell


def test_job_seconds_equals_running_the_job_round_by_round():
    """Slots refilled in order from the queue as rows finish; free slots taken at once."""
    rng = np.random.default_rng(2)
    for _ in range(50):
        B, W, free = int(rng.integers(1, 8)), int(rng.integers(0, 12)), int(rng.integers(0, 3))
        rounds, queued = rng.integers(1, 30, B), rng.integers(1, 30, W)
        cost = np.concatenate([[0.0], rng.uniform(1.0, 5.0, B + free)])
        queue = list(queued)
        left = list(rounds) + [queue.pop(0) if queue else 0 for _ in range(free)]
        total = 0.0
        while any(n > 0 for n in left):
            total += cost[sum(n > 0 for n in left)]
            left = [n - 1 for n in left]
            for i, n in enumerate(left):
                if n == 0 and queue:  # a slot freed this round: the next row takes it
                    left[i] = queue.pop(0)
        got = job_seconds(rounds.astype(float), queued.astype(float), cost, free)
        assert got == pytest.approx(total)


# One round's seconds at batch size B and depth k: a launch-bound GPU, like the H200's rounds
# with the trained hybrid (B=16: plain 4.1 ms, depth 3 7.8 ms; B=1: 2.6 and 4.2 ms).
def round_cost(B: int, k: int) -> float:
    return (0.0025 + 0.0001 * B) if k == 0 else (0.004 + 0.00024 * B)


def run_job(
    accept: np.ndarray,
    B: int,
    mode: str,
    seed: int = 0,
    tokens: int = 96,
    passes: int = 1,
    policy: DepthPolicy | None = None,
    spike: float = 0.0,
) -> float:
    """Simulated seconds of the last of `passes` jobs, each len(accept) rows of `tokens` at
    batch size B joining in order as slots free (one policy throughout, as in a process).
    mode "plain" / "fixed" (depth 3) / "throughput" (the policy, tokens per second) / "job"
    (the policy told the rows still to run: what the engine does when few wait). `spike`:
    seconds the policy sees a drafting shape's first round cost more (MLX CUDA building
    attention for a new span), left out of the job's time (both arms of a test pay them)."""
    rng = np.random.default_rng(seed)
    policy = policy or DepthPolicy(max_depth=3, extremes_only=True)
    spiked: set = set()
    for _ in range(passes):
        N = len(accept)
        left = np.full(N, tokens)
        drafted, accepted = np.zeros(N), np.zeros(N)
        running, queue = list(range(min(B, N))), list(range(min(B, N), N))
        total = 0.0
        while running:
            live = np.array(running)
            if mode in ("plain", "fixed"):
                k = 0 if mode == "plain" else 3
            else:
                if mode == "job":
                    rows = (left[live].astype(float), drafted[live], accepted[live])
                    view = DrainingRows(*rows, waiting=left[queue].astype(float))
                    policy.job_view = lambda view=view: view
                k = policy.choose(len(live))
            counts = np.minimum(k, left[live] - 1)
            hits = rng.random((len(live), 3)) < accept[live]
            runs = np.minimum(np.cumprod(hits, axis=1).sum(1), counts)
            seconds = round_cost(len(live), int(counts.max())) * rng.normal(1.0, 0.02)
            total += seconds
            if mode not in ("plain", "fixed"):
                shape = (len(live), int(counts.max()))
                build = spike if shape[1] and shape not in spiked else 0.0
                spiked.add(shape)
                policy.observe(counts, runs, seconds + build)
            drafted[live] += counts
            accepted[live] += runs
            left[live] -= runs + 1
            for r in running:
                if left[r] <= 0:
                    policy.observe_row(int(drafted[r]), int(accepted[r]))
            running = [r for r in running if left[r] > 0]
            while queue and len(running) < B:
                running.append(queue.pop(0))
    return total


BASE = np.array([0.72, 0.69, 0.68])  # the trained hybrid's conditional acceptance


def medians(accept: np.ndarray, B: int, modes: tuple, **kw: int) -> dict:
    return {m: float(np.median([run_job(accept, B, m, s, **kw) for s in range(5)])) for m in modes}


def test_one_slow_row_makes_a_draining_batch_decode_plainly():
    """15 rows accept as the trained hybrid does, one at 0.3x: per round depth 3 is 1.3x
    plain at B=16, but the slow row drains alone for ~37 depth-3 rounds and the job ends later
    than plainly decoded (what the H200 run showed: 0.75x). Weighing when the rows finish, the
    policy keeps the job at plain speed; weighing tokens per second, it loses like fixed depth."""
    accept = np.tile(BASE, (16, 1))
    accept[7] *= 0.3
    t = medians(accept, 16, ("plain", "fixed", "throughput", "job"))
    assert t["fixed"] > 1.08 * t["plain"], t  # the case: drafting loses this job
    assert t["throughput"] > 1.05 * t["plain"], t
    assert t["job"] < t["throughput"], t
    assert t["job"] < 1.05 * t["plain"], t


def test_rows_that_accept_alike_keep_drafting_while_they_drain():
    accept = np.tile(BASE, (16, 1))
    t = medians(accept, 16, ("plain", "fixed", "job"), passes=2)
    assert t["fixed"] < 0.85 * t["plain"], t  # the case: drafting pays
    assert t["job"] < 1.06 * t["fixed"], t


def test_new_rows_are_expected_to_accept_as_finished_rows_spread():
    """16 prompts at B=8, twice (P5's job, after its warm pass): a third of the rows accept
    at 0.5x. Drafted throughout, the slow rows of the second wave drain alone and the job
    ends later than plainly decoded. Expecting each new row to accept as the average one, the
    policy drafts and loses likewise; expecting the spread the first pass's rows showed, it
    keeps the job near plain speed."""
    accept = np.tile(BASE, (16, 1))
    accept[::3] *= 0.5
    t = medians(accept, 8, ("plain", "fixed", "throughput", "job"), passes=2)
    assert t["fixed"] > 1.05 * t["plain"], t  # the case: drafting loses this job
    assert t["job"] < t["throughput"], t
    assert t["job"] < 1.03 * t["plain"], t


def test_span_builds_set_aside_keep_a_draining_batch_drafting():
    """MLX CUDA builds attention again for each new span a drafting window reads: 50-100 ms
    rounds, once each, amid 4-7 ms ones, at shapes the warm-up built. Taken as costs, they made the shapes a draining
    batch passes through look 10x dearer at depth 3 and the policy decoded plainly where
    drafting pays (H200: every 16-prompt job's second wave). Set aside as spikes, the choices
    and the job's time are those of a run without them."""
    accept = np.tile(BASE, (16, 1))

    def cuda_policy(spike_factor: float) -> DepthPolicy:
        policy = DepthPolicy(3, extremes_only=True, one_off_max=3, run=4, spike_factor=spike_factor)
        for b in range(16, 0, -1):  # the build-only warm-up: every size's shapes built
            for k in (0, 3):
                policy.forced = k
                policy.observe(np.full(b, k), np.full(b, min(k, 2)), round_cost(b, k))
        policy.forget_rounds()
        return policy

    def job(spike: float, spike_factor: float) -> float:
        runs = [
            run_job(accept, 16, "job", s, passes=2, policy=cuda_policy(spike_factor), spike=spike)
            for s in range(5)
        ]
        return float(np.median(runs))

    clean, spiked = job(0.0, 4.0), job(0.06, 4.0)
    assert spiked < 1.03 * clean, (spiked, clean)
    assert job(0.06, float("inf")) > 1.08 * clean  # the case: counted, they stop drafting


def test_a_spike_is_set_aside_once_a_cost_that_stays_counts():
    policy = DepthPolicy(3, extremes_only=True, one_off_max=3, run=4)
    for _ in range(6):
        policy.observe(np.full(8, 3), np.full(8, 2), 0.005)
    policy.observe(np.full(8, 3), np.full(8, 2), 0.06)  # a span's build
    assert policy.round_costs(8)[3] == pytest.approx(0.005)
    policy.observe(np.full(3, 3), np.full(3, 2), 0.006)  # (3, 3)'s first round: a build
    policy.observe(np.full(3, 3), np.full(3, 2), 0.07)  # judged by (8, 3): fewer rows
    assert policy.round_costs(3)[3] < 0.01
    for _ in range(8):  # twice running or more: the shape's cost now
        policy.observe(np.full(8, 3), np.full(8, 2), 0.06)
    assert policy.round_costs(8)[3] == pytest.approx(0.06)
    policy.observe(np.full(8, 3), np.full(8, 2), 0.005)  # its usual cost again, then a spike
    before = policy.round_costs(8)[3]
    policy.observe(np.full(8, 3), np.full(8, 2), 0.9)
    assert policy.round_costs(8)[3] == before
    cpu = DepthPolicy(3)  # where nothing builds per shape, every round counts
    for t in (0.005, 0.005, 0.005, 0.005, 0.06, 0.06, 0.06, 0.06):  # the first: a build
        cpu.observe(np.full(8, 3), np.full(8, 2), t)
    assert cpu.round_costs(8)[3] == pytest.approx(0.06)


def test_a_warm_ups_synthetic_rows_are_not_the_reference_live_rows_are_read_against():
    """The warm-up's synthetic rows accept otherwise than traffic (here 0.95 against 0.6).
    Read against them, two ordinary live rows looked 0.6x as good as the rows before them
    and decoded plainly (the CPU single stream's first request: 1.34x when drafted); read
    against live rows, they draft."""
    rng = np.random.default_rng(3)
    policy = DepthPolicy(max_depth=3)
    for k in [0, 3] * 6:  # the warm-up: synthetic rows, every draft accepted
        policy.forced = k
        policy.observe(np.full(2, k), np.full(2, k), round_cost(2, k))
    policy.end_warm_up([2])
    drafted, accepted = np.zeros(2), np.zeros(2)
    for _ in range(12):  # live rows accept 0.6 a position
        runs = np.cumprod(rng.random((2, 3)) < 0.6, axis=1).sum(1)
        policy.observe(np.full(2, 3), runs, round_cost(2, 3))
        drafted, accepted = drafted + 3, accepted + runs
    for _ in range(4):
        policy.observe(np.zeros(2, dtype=int), np.zeros(2, dtype=int), round_cost(2, 0))
    policy._chosen.clear()
    policy.job_view = lambda: DrainingRows(np.full(2, 60.0), drafted, accepted)
    assert policy.choose(2) == 3


def test_the_engine_shows_the_job_end_before_any_choice_once_arrivals_stop(monkeypatch):
    """With a host-side drafter (n-grams) pipelined rounds ask the policy for the depth before
    the round is drafted; the job's end is shown before that first question. Requests that
    keep arriving mean live traffic (slots refill): tokens per second decide meanwhile."""
    from tests.tiny import mixed_prompts, tiny_model
    from workers import Engine, NgramDrafter, SamplingParams

    weighed: list[int] = []
    real = DepthPolicy._drain_choice

    def spy(self, drain, switching_from):  # type: ignore[no-untyped-def]
        weighed.append(len(drain.remaining) + len(drain.waiting))
        return real(self, drain, switching_from)

    monkeypatch.setattr(DepthPolicy, "_drain_choice", spy)
    target = tiny_model("qwen3", seed=3)
    kw = dict(drafter=NgramDrafter(), max_batch_size=2, draft_depth=3, adaptive_depth=True)
    sp = SamplingParams(max_tokens=72, ignore_eos=True)
    engine = Engine(target, **kw)
    prompts = mixed_prompts(4, seed=2)
    engine.generate(prompts, sp)
    assert weighed and max(weighed) <= 4, weighed  # the job's rows, once arrivals stopped

    weighed.clear()
    engine = Engine(target, **kw)
    for i in range(240):  # a request arrives every 4th step: live traffic, a short queue
        if i % 4 == 0:
            engine.add_request(f"r{i}", prompts[i % 4], SamplingParams(max_tokens=16))
        engine.step()
    policy = engine.depth_policy
    assert policy is not None and 2 in policy._probed  # B=2 was weighed, by tokens per second
    assert len(engine.waiting) <= 8 * 2  # few enough to weigh, had the traffic stopped
    assert weighed == []

    # A policy handed on to another engine (a learnt policy reused) weighs that engine's job;
    # the engine it came from is not kept alive by it.
    import gc
    import weakref

    gone = weakref.ref(engine)
    fresh = Engine(target, **kw)
    fresh.depth_policy = policy
    del engine
    gc.collect()
    assert gone() is None
    fresh.generate(prompts, sp)
    assert weighed and max(weighed) <= 4, weighed


def test_switches_and_first_rounds_are_measured_not_set_aside_as_spikes():
    """A depth switch (a graph rebuild on MLX CUDA, 15-30 ms against 2.5-5 ms rounds) and a
    shape's first round (its build) cost over 4x a typical round by nature: each is measured
    as what it is (`switch_cost`, `build_cost`), never set aside as a spike."""
    policy = DepthPolicy(3, extremes_only=True, one_off_max=3, run=4)
    for _ in range(3):
        for k, t in ((0, 0.0025), (3, 0.005)):
            policy.observe(np.full(8, k), np.full(8, min(k, 2)), t + 0.02)  # the switch
            for _ in range(5):
                policy.observe(np.full(8, k), np.full(8, min(k, 2)), t)
    assert policy.switch_cost() > 0.015
    policy.observe(np.full(7, 3), np.full(7, 2), 0.04)  # (7, 3)'s first round: its build
    policy.observe(np.full(7, 3), np.full(7, 2), 0.005)
    policy.observe(np.full(7, 3), np.full(7, 2), 0.005)
    assert policy._build and policy._build[-1] == pytest.approx(0.035)
    assert sum((b, k) == (7, 3) for b, k, _ in policy._rows) == 2


def _two_row_job(once=(0.0, 0.0, 0.0, 0.0), margin=0.1) -> JobCosts:
    """A round costs 1.0 / 1.3 / 1.6 / 1.9 s at depth 0-3, whatever its rows; acceptance 0.9
    at every position, every row the policy learnt from at 0.9 of its drafts."""
    costs = np.zeros((3, 4))
    costs[1:] = [1.0, 1.3, 1.6, 1.9]
    return JobCosts(costs=costs, acceptance=np.full(3, 0.9), reference=0.9,
                    row_rates=np.zeros(0), prior=24.0, once=np.array(once),
                    margin=np.full(4, margin), depths=[0, 1, 2, 3])  # fmt: skip


def test_job_depth_drafts_for_fast_rows_and_stops_when_a_slow_row_sets_the_end():
    """Worked by hand: two rows of 30 tokens that accept 0.9 of their drafts expect 3.44
    tokens a depth-3 round: 8.7 rounds, 16.6 s against 30 plain rounds (30 s). If one row
    has accepted 15 of 300 drafts, it expects 1.13 tokens a round at any depth: the job lasts
    its 26.6 rounds, 50.6 s at depth 3 and 35 s at depth 1, so plain (30 s) finishes first."""
    fast = DrainingRows(remaining=np.array([30.0, 30.0]), drafted=np.array([300.0, 300.0]),
                        accepted=np.array([270.0, 270.0]))  # fmt: skip
    assert job_depth(fast, _two_row_job()) == 3
    slow = DrainingRows(remaining=np.array([30.0, 30.0]), drafted=np.array([300.0, 300.0]),
                        accepted=np.array([270.0, 15.0]))  # fmt: skip
    assert job_depth(slow, _two_row_job()) == 0
    # What taking depth 3 costs once (20 s: 36.6 in all) leaves depth 2 (17.7 s) the best.
    assert job_depth(fast, _two_row_job(once=(0.0, 0.0, 0.0, 20.0))) == 2
    # A gain (30 / 16.6 = 1.8x) under the margin asked of drafting (100%) is not taken...
    assert job_depth(fast, _two_row_job(margin=1.0)) == 0
    # ... unless depth 3 is held already: kept while no slower than plain (hold_depth)...
    assert job_depth(fast, _two_row_job(margin=1.0)._replace(current=3)) == 3
    # ... and left where plain finishes first (the slow row: 50.6 s against 30).
    assert job_depth(slow, _two_row_job(margin=1.0)._replace(current=3)) == 0
