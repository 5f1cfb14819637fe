"""Adaptive draft depth in the engine: obeying the policy's caps losslessly, feeding it each
round's own cost, and the drafters' work while it drafts nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny import VOCAB, mixed_prompts, perturbed, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, ModelDrafter, SamplingParams
from workers.depth_policy import DepthPolicy


class CyclingPolicy(DepthPolicy):
    """Caps depth 0, 1, 2, ... round by round: the engine must stay lossless under any cap."""

    calls = 0

    def choose(self, batch_size: int) -> int:
        self.calls += 1
        return self.calls % (self.max_depth + 1)


class SameSizeDrafter(ModelDrafter):
    """The perturbed copy of the target as a draft model, calibrated at what it measures
    (~1.0 target forwards) rather than timed: the tests using it are about other things, and
    on a loaded 2-core machine the timing of a tiny forward read past the hopeless ratio
    (1.5) once, which set the drafter aside (a CI run: no drafts where the test expected some).
    The calibration itself is tested below."""

    def cost_ratio(self, target, width: int = 8, reps: int = 3) -> float:  # type: ignore[no-untyped-def]
        return 1.0


@pytest.fixture(scope="module")
def models():
    target = tiny_model("llama", seed=7)
    return target, perturbed(target, scale=0.3, seed=2)


def test_adaptive_engine_is_lossless_and_uses_several_depths(models):
    target, draft = models
    prompts = mixed_prompts(5, seed=4)
    engine = Engine(
        target, drafter=SameSizeDrafter(draft), max_batch_size=5, draft_depth=4, adaptive_depth=True
    )
    assert isinstance(engine.depth_policy, DepthPolicy)
    assert not engine.depth_policy.cap_by_larger  # the CPU builds no graph per shape
    engine.depth_policy = CyclingPolicy(max_depth=4)
    outs = engine.generate(prompts, SamplingParams(max_tokens=24))
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 24), f"row {i}")
    widths = {s.num_draft_tokens // max(s.num_drafts, 1) for s in engine.take_round_stats()}
    assert len(widths) >= 3, widths


def test_cap_spares_rejection_rows_and_is_off_by_default(models):
    target, draft = models
    prompts = mixed_prompts(2, seed=5)
    engine = Engine(target, drafter=SameSizeDrafter(draft), draft_depth=3, adaptive_depth=True)
    engine.depth_policy = CyclingPolicy(max_depth=3)
    engine.depth_policy.choose = lambda batch_size: 0  # type: ignore[method-assign]
    greedy = SamplingParams(max_tokens=12)
    sampled = SamplingParams(max_tokens=12, temperature=0.8, seed=3, acceptance="rejection")
    coupled = SamplingParams(max_tokens=12, temperature=0.8, seed=3, acceptance="coupled")
    outs = engine.generate([prompts[0], prompts[1], prompts[1]], [greedy, sampled, coupled])
    assert outs[0].num_draft_tokens == 0 and outs[2].num_draft_tokens == 0
    assert outs[1].num_draft_tokens > 0  # rejection rows keep their depth: tokens depend on it
    assert Engine(target, drafter=ModelDrafter(draft)).depth_policy is None
    assert Engine(target, adaptive_depth=True).depth_policy is None  # nothing to draft with


class RandomPolicy(DepthPolicy):
    """Seeded random caps, depth 0 included."""

    rng = np.random.default_rng(0)

    def choose(self, batch_size: int) -> int:
        return int(self.rng.integers(0, self.max_depth + 1))


@pytest.mark.parametrize("drafter", ["model", "mtp"])
def test_no_draft_rounds_with_rows_joining_and_leaving(models, drafter):
    """Depth-0 rounds between joins and exits (an adaptive engine does this all the time): a
    drafter must keep its rows in step with the engine's (seen: the draft model's cache kept a
    per-row window array from before a join, and the next exit indexed past its end)."""
    from tests.tiny import fit_mtp_head
    from workers.drafters.mtp import MTPDrafter

    target, draft = models
    if drafter == "mtp":
        target = tiny_model("qwen3", seed=3)
        made = MTPDrafter(target, fit_mtp_head(target, steps=20))
    else:
        made = SameSizeDrafter(draft)
    engine = Engine(target, drafter=made, max_batch_size=6, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = RandomPolicy(max_depth=3)
    rng = np.random.default_rng(0)
    prompts = mixed_prompts(24, seed=0)
    budgets = [int(b) for b in rng.integers(1, 9, size=len(prompts))]
    got: dict[str, list[int]] = {}

    def step() -> None:
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)

    for i, (p, n) in enumerate(zip(prompts, budgets)):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=n))
        for _ in range(int(rng.integers(0, 3))):  # 0-2 steps: joins come alone or in groups
            step()
    while engine.has_work():
        step()
    for i, (p, n) in enumerate(zip(prompts, budgets)):
        assert_matches(got[f"r{i}"], reference_greedy(target, p, n), f"r{i}")


class ZeroThenDeepPolicy(DepthPolicy):
    """Depth 0 for the first `zero_rounds` rounds, then the full depth."""

    zero_rounds = 6

    def choose(self, batch_size: int) -> int:
        return 0 if self._rounds < self.zero_rounds else self.max_depth


def test_a_draft_model_does_no_work_while_the_policy_drafts_nothing(models):
    """Depth-0 rounds run pipelined and leave the draft model untouched (not even a prefill);
    when drafting starts it catches up on the skipped tokens and the output stays exact."""
    target, draft = models
    drafter = SameSizeDrafter(draft, prefill_step_size=4)  # small chunks: the catch-up path
    engine = Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = ZeroThenDeepPolicy(max_depth=3)
    prompts = mixed_prompts(4, seed=5)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=16))
    got: dict[str, list[int]] = {}
    pipelined = 0
    while engine.has_work():
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
        engine.depth_policy._rounds += 1  # this policy counts steps itself
        pipelined += engine._flight is not None
        if engine.depth_policy._rounds <= ZeroThenDeepPolicy.zero_rounds:
            assert not drafter.cache.lengths.any(), "no draft-model work at depth 0"
    assert pipelined >= 3, "depth-0 rounds with a host-side drafter run pipelined"
    stats = engine.take_round_stats()
    assert sum(s.num_draft_tokens for s in stats) > 0
    for i, p in enumerate(prompts):
        assert_matches(got[f"r{i}"], reference_greedy(target, p, 16), f"r{i}")


class CalibratedSlowDrafter(ModelDrafter):
    """A draft model whose calibration says it costs twice the target per forward."""

    def cost_ratio(self, target, width: int = 8, reps: int = 3) -> float:  # type: ignore[no-untyped-def]
        return 2.0


def test_a_draft_model_as_slow_as_the_target_is_never_probed(models):
    """The engine calibrates a draft model against the target; past the policy's hopeless ratio
    drafting cannot pay, so the engine sets the drafter aside and runs as a plain one (no probe,
    no exploration, no drafter work per round), saying why."""
    target, draft = models
    slow = CalibratedSlowDrafter(draft)
    engine = Engine(target, drafter=slow, max_batch_size=4, adaptive_depth=True)
    assert engine.drafter is None and engine.depth_policy is None
    assert "2.00 target forwards" in engine.drafter_off
    prompts = mixed_prompts(4, seed=9)
    outs = engine.generate(prompts, SamplingParams(max_tokens=40))
    assert sum(s.num_draft_tokens for s in engine.take_round_stats()) == 0
    assert not slow.histories  # never fed a row
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 40), "never probed")
    # The real calibration (draft forward time over target forward time) is a plain ratio.
    ratio = ModelDrafter(draft).cost_ratio(target)
    assert 0.0 < ratio < 50.0


class SlowDeepDrafter:
    """Wraps a device-resident drafter: proposing costs `per_step` host seconds per draft step,
    so a round's cost depends on its own depth only."""

    def __init__(self, inner, per_step: float):
        self.inner, self.per_step = inner, per_step

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, request):
        import time

        time.sleep(self.per_step * int(np.max(request.depths, initial=0)))
        return self.inner.propose(request)


class AlternatingPolicy(DepthPolicy):
    """Depth 0, max, 0, max, ...; records what the engine reports for each round."""

    calls = 0

    def choose(self, batch_size: int) -> int:
        self.calls += 1
        return self.max_depth if self.calls % 2 else 0

    def observe(self, draft_counts, num_accepted, step_time_s):
        self.seen = getattr(self, "seen", []) + [(int(draft_counts.max(initial=0)), step_time_s)]


def test_pipelined_rounds_report_their_own_cost_to_the_policy():
    """A pipelined step launches round N+1 and collects N; the policy must be told N's cost,
    not N+1's (on the CPU launching N+1 computes most of it). Seen: every depth-0 round was
    charged the next, deep round's drafting, so the policy saw all depths cost alike."""
    from bench.forced_drafter import DeviceForcedDrafter

    target = tiny_model("llama", seed=7)
    prompts = mixed_prompts(2, seed=1)
    sp = SamplingParams(max_tokens=24, ignore_eos=True)
    refs = {tuple(p): o.tokens for p, o in zip(prompts, Engine(target).generate(prompts, sp))}
    drafter = SlowDeepDrafter(DeviceForcedDrafter(refs, VOCAB), per_step=0.01)
    engine = Engine(target, drafter=drafter, max_batch_size=2, draft_depth=3, adaptive_depth=True)
    policy = engine.depth_policy = AlternatingPolicy(max_depth=3)
    outs = engine.generate(prompts, sp)
    assert [o.tokens for o in outs] == [refs[tuple(p)] for p in prompts]
    deep = [t for k, t in policy.seen if k == 3]
    plain = [t for k, t in policy.seen if k == 0]
    assert len(deep) >= 2 and len(plain) >= 2, policy.seen
    # A deep round sleeps 30 ms while it is built; a plain round does not sleep at all.
    assert min(deep) >= 0.03 and max(plain) < 0.03, policy.seen


def padded_mtp_engine(**config: object) -> tuple[Engine, object, list[tuple[int, int]]]:
    """An adaptive MTP engine on a tiny qwen3 as MLX CUDA runs it (`pad_verify`: drafts padded
    to one width per batch size), its depth cycled; returns it, the target, and the (rows,
    width) of every round it launches."""
    from tests.tiny import fit_mtp_head
    from workers.drafters.mtp import MTPDrafter

    target = tiny_model("qwen3", seed=3)
    drafter = MTPDrafter(target, fit_mtp_head(target, steps=20))
    engine = Engine(
        target, drafter=drafter, max_batch_size=5, draft_depth=4, adaptive_depth=True, **config
    )
    engine.pad_verify = True  # what a CUDA device sets
    engine.depth_policy = CyclingPolicy(max_depth=4)
    shapes: list[tuple[int, int]] = []
    launch = engine._launch

    def recorded():
        flight = launch()
        shapes.append((len(flight.rows), flight.width))
        return flight

    engine._launch = recorded  # type: ignore[method-assign]
    return engine, target, shapes


def test_padded_verify_windows_keep_every_depth_lossless():
    """On CUDA the engine pads a pipelined round's drafts to draft_depth (one verify shape
    whatever depth the policy picks) and the MTP head's packed backlog window to a multiple of
    8; padding must never be accepted or committed."""
    engine, target, shapes = padded_mtp_engine()
    prompts = mixed_prompts(5, seed=8)
    engine.drafter.pad_packed_to = 8  # type: ignore[union-attr]  # the MTP backlog's rounding
    asked = []
    propose = engine.drafter.propose

    def recorded_propose(request):
        asked.append(int(np.max(request.depths)))
        return propose(request)

    engine.drafter.propose = recorded_propose  # type: ignore[method-assign]
    outs = engine.generate(prompts, SamplingParams(max_tokens=24))
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 24), f"row {i}")
    widths = {w for _, w in shapes}
    assert widths == {1, 5}, shapes  # plain rounds, and every drafting round at full width
    stats = engine.take_round_stats()
    # The head drafts 4 deep every drafting round (one graph), the verify counts the cap only.
    assert asked.count(4) >= len(asked) // 2, asked  # near max_tokens rows allow fewer
    assert len({s.num_draft_tokens // max(s.num_drafts, 1) for s in stats if s.num_drafts}) >= 3


def test_padded_verify_windows_narrow_where_max_verify_tokens_caps_the_batch():
    """The padded width is the deepest a row may draft at the round's batch size: a verify
    capped at 20 tokens pads 5 rows to 3 drafts (a [5, 4] window, not [5, 5]) and 4 rows to 4,
    so `max_verify_tokens` narrows the graph on CUDA too; every row stays mlx-lm's."""
    engine, target, shapes = padded_mtp_engine(max_verify_tokens=20)
    prompts = mixed_prompts(5, seed=8)
    sp = [SamplingParams(max_tokens=12 + 4 * i) for i in range(len(prompts))]  # rows leave apart
    outs = engine.generate(prompts, sp)
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 12 + 4 * i), f"row {i}")
    drafting = {(b, w) for b, w in shapes if w > 1}
    assert (5, 4) in drafting and (5, 5) not in drafting, shapes
    assert all(w == min(4, 20 // b - 1) + 1 for b, w in drafting), shapes
    assert any(w == 5 for _, w in drafting), shapes  # fewer rows: the full depth again


class ConstantPolicy(AlternatingPolicy):
    def choose(self, batch_size: int) -> int:
        return self.max_depth


def test_rounds_of_one_shape_overlap_and_a_change_of_shape_waits(monkeypatch):
    """On the CPU launching round N+1 computes N's tail. Waiting for N before every launch
    keeps each round's time its own but loses the overlap of building N+1 with N's tail (the
    MTP head at B=1 on the CPU: 13.3 ms rounds with the wait, ~10.5 ms without); between
    rounds of one shape the carried tails cancel, so only a change of depth or batch waits."""
    from bench.forced_drafter import DeviceForcedDrafter
    from workers.pipeline import Flight

    waits = []
    real_wait = Flight.wait
    monkeypatch.setattr(Flight, "wait", lambda self: (waits.append(1), real_wait(self))[1])
    target = tiny_model("llama", seed=7)
    prompts = mixed_prompts(1, seed=3)
    sp = SamplingParams(max_tokens=40, ignore_eos=True)
    refs = {tuple(p): o.tokens for p, o in zip(prompts, Engine(target).generate(prompts, sp))}
    seen = {}
    for name, policy_cls in (("constant", ConstantPolicy), ("alternating", AlternatingPolicy)):
        drafter = DeviceForcedDrafter(refs, VOCAB)
        engine = Engine(
            target, drafter=drafter, max_batch_size=1, draft_depth=3, adaptive_depth=True
        )
        if not engine._wait_before_launch:
            pytest.skip("this backend does not compute while launching (not the CPU)")
        policy = engine.depth_policy = policy_cls(max_depth=3)
        waits.clear()
        outs = engine.generate(prompts, sp)
        assert [o.tokens for o in outs] == [refs[tuple(p)] for p in prompts]
        seen[name] = (len(waits), len(policy.seen))
    waited, rounds = seen["constant"]
    # Depth 3 throughout; only the last rounds, capped by max_tokens, change shape.
    assert rounds >= 8 and waited <= 3, seen
    waited, rounds = seen["alternating"]
    assert waited >= rounds - 2, seen  # every change of depth waits for the round in flight
