"""Engine warm-up (workers/warm_up.py): every depth measured at every bucket's batch size on
synthetic prompts before serving, and live costs read against it with the drift since.

What it must not change is the output: a warmed engine's greedy tokens equal mlx-lm's plain
decode. What it must change: live traffic starts knowing each bucket (no probe rounds, rows
joining a batch where drafting cannot pay skip the head's prompt pairs), and it leaves nothing
behind (no warm-up prompts in the prefix cache, no warm-up rounds in the stats).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.backend import Backend
from workers.depth_policy import DepthPolicy
from workers.drafters.mtp import MTPDrafter
from workers.warm_up import batch_sizes

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def setup():
    target = tiny_model("qwen3", seed=3, layers=2)
    return target, fit_mtp_head(target, steps=60)


def assert_no_trace_and_mlx_lm_outputs(engine: Engine, target, seed: int, label: str) -> None:
    """A warm-up leaves nothing behind (prefix cache, round stats), and the engine still
    decodes as mlx-lm does."""
    assert engine.prefix_cache.used_tokens == 0 and engine.take_round_stats() == []
    prompts = mixed_prompts(3, seed=seed)
    outs = engine.generate(prompts, SamplingParams(max_tokens=16))
    for i, (p, o) in enumerate(zip(prompts, outs)):
        assert_matches(o.tokens, reference_greedy(target, p, 16), f"{label} row {i}")


def test_batch_sizes_cover_every_bucket_up_to_the_largest():
    assert batch_sizes(1) == [1]
    assert batch_sizes(16) == [1, 2, 4, 8, 16]
    assert batch_sizes(12) == [1, 2, 4, 8, 12]


def test_a_warmed_engine_knows_every_bucket_leaves_no_trace_and_matches_mlx_lm(setup):
    target, head = setup
    engine = Engine(
        target, drafter=MTPDrafter(target, head), max_batch_size=4, draft_depth=3,
        adaptive_depth=True, prefix_cache_tokens=256, warm_up=True,
    )  # fmt: skip
    policy = engine.depth_policy
    assert policy is not None and policy.forced is None
    assert policy._probed == {1, 2, 3}  # sizes 1, 2, 4: the buckets of 1, 2-3, 4-7
    for size in (1, 2, 4):
        for k in range(4):
            assert (size, k) in policy._warm, f"depth {k} at B={size} was not measured"
    assert policy._tried[0] <= policy.min_evidence + 1e-9  # acceptance: a weak prior only
    assert engine.prefix_cache.used_tokens == 0 and engine.take_round_stats() == []
    assert not engine.has_work() and engine.rows == []

    probes: list[int] = []
    real_probe = policy._probe

    def spy(batch_size: int) -> int | None:  # a live warm-up ladder's depth, if one ran
        k = real_probe(batch_size)
        if k is not None:
            probes.append(k)
        return k

    policy._probe = spy  # type: ignore[method-assign]
    prompts = mixed_prompts(4, seed=5)
    outs = engine.generate(prompts, SamplingParams(max_tokens=24))
    for i, (p, o) in enumerate(zip(prompts, outs)):
        assert_matches(o.tokens, reference_greedy(target, p, 24), f"warmed row {i}")
    # No bucket was probed live: every round ran the policy's choice, not a 0, 0, 1, 1 ladder.
    assert probes == []


def test_live_costs_are_read_against_the_drift_since_the_warm_up():
    """B=16 on two contended CPU cores: the warm-up timed plain 15 ms and depth 2 36 ms; live,
    plain rounds take 21 ms (longer contexts, a busier machine). Depth 2 then costs ~50 ms, a
    tie with plain at this acceptance (2.5 tokens a row), so plain stays; read unscaled (36 ms)
    it looks 1.46x ahead of plain."""
    p = DepthPolicy(max_depth=2, explore_every=0)
    ones = np.ones(16, dtype=np.int64)
    p.forced = 0
    for k in [0] + [0, 1, 2] * 5:
        p.forced = k
        cost = {0: 0.015, 1: 0.026, 2: 0.036}[k]
        p.observe(ones * k, ones * 0, cost)
    p.end_warm_up([16])
    p._hit[:], p._tried[:] = [800.0, 700.0], [1000.0, 800.0]  # acceptance 0.8, 0.875: 2.5 tokens
    for _ in range(40):
        assert p.choose(16) == 0
        p.observe(ones * 0, ones * 0, 0.021)
    costs = p.round_costs(16)
    assert costs[2] == pytest.approx(0.036 * 0.021 / 0.015, rel=1e-6)
    assert p.choose(16) == 0


def test_a_gain_within_the_noise_of_a_few_rounds_does_not_switch_and_a_measured_one_does():
    """Rounds at +-20% (two contended CPU cores): depth 1 predicted 15% ahead of plain from four
    rounds each is within the medians' error, so plain stays; from sixty rounds each the same
    gain clears it."""
    ones = np.ones(8, dtype=np.int64)

    def policy_after(n: int) -> DepthPolicy:
        p = DepthPolicy(max_depth=1, explore_every=0)
        p._probed.add(ones.size.bit_length())  # warmed: the choice alone decides
        noise = np.tile([0.8, 1.2, 0.9, 1.1], n)
        for k, base in ((0, 0.010), (1, 0.010 * 1.8 / 1.15)):
            p.observe(ones * k, ones * k, base)  # a shape's first round is not kept
            for x in noise[: n + 1]:
                p.observe(ones * k, ones * k, base * x)
        p._hit[:], p._tried[:] = [800.0], [1000.0]  # acceptance 0.8: 1.8 tokens a row
        return p

    few, many = policy_after(4), policy_after(60)
    assert few._rates(8)[1] / few._rates(8)[0] > 1 + few.min_gain  # past the fixed margin
    assert few.choose(8) == 0
    assert many.choose(8) == 1


def test_an_engine_without_a_policy_runs_rounds_at_every_size(setup, monkeypatch):
    """No depth policy to inform, but kernels or graphs to build: on the CPU (and Metal)
    KERNEL_ROUNDS rounds at each bucket's size, so that MLX builds its compiled kernels (plain
    ones, or at a fixed depth); where each new shape is a graph build (MLX CUDA) every draining
    size. Either way no trace is left and outputs still equal mlx-lm's."""
    from workers import warm_up as wu

    target, head = setup
    steps: list[int] = []
    real_step = Engine.step

    def counting(self):  # type: ignore[no-untyped-def]
        steps.append(len(self.rows))
        return real_step(self)

    def steps_at_each_size(rounds: int) -> list[int]:
        steps.clear()
        monkeypatch.setattr(wu, "KERNEL_ROUNDS", rounds)
        Engine(target, max_batch_size=4, warm_up=True)
        return [steps.count(size) for size in (1, 2, 4)]

    monkeypatch.setattr(Engine, "step", counting)
    # The rounds a size runs beyond its prefill's and its abort's steps: exactly KERNEL_ROUNDS.
    without, with_rounds = steps_at_each_size(0), steps_at_each_size(wu.KERNEL_ROUNDS)
    assert [w - o for w, o in zip(with_rounds, without)] == [wu.KERNEL_ROUNDS] * 3, steps
    monkeypatch.setattr(Engine, "step", real_step)
    engine = Engine(target, max_batch_size=4, warm_up=True, prefix_cache_tokens=256)
    assert_no_trace_and_mlx_lm_outputs(engine, target, seed=5, label="plain warmed (CPU)")
    fixed = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=4, draft_depth=3,
                   warm_up=True, prefix_cache_tokens=256)  # fmt: skip
    assert fixed.depth_policy is None
    assert_no_trace_and_mlx_lm_outputs(fixed, target, seed=9, label="fixed depth warmed (CPU)")

    steps.clear()
    monkeypatch.setattr(Engine, "step", counting)
    cuda_like = Backend(builds_per_shape=True, computes_in_launch=False)
    monkeypatch.setattr(wu.Backend, "current", classmethod(lambda cls: cuda_like))
    engine = Engine(target, max_batch_size=4, warm_up=True, prefix_cache_tokens=256)
    assert {1, 2, 3, 4} <= set(steps)  # rounds ran at every draining size
    monkeypatch.setattr(Engine, "step", real_step)
    assert_no_trace_and_mlx_lm_outputs(engine, target, seed=6, label="plain warmed")


KERNELS_PROBE = r"""
import json, os, sys
from pathlib import Path
from tests.tiny import mixed_prompts, tiny_model
from workers import Engine, SamplingParams
from workers.cpu_jit import mlx_kernel_dir

def kernels():
    return sorted(p.name for p in mlx_kernel_dir().glob("*.so"))

target = tiny_model("qwen3", seed=3, layers=2)
engine = Engine(target, max_batch_size=4, warm_up=True)
built = kernels()
engine.generate(mixed_prompts(6, seed=8), SamplingParams(max_tokens=12))
print(json.dumps({"warm_up": built, "after_traffic": kernels()}))
"""


@pytest.mark.skipif(not Backend.current().computes_in_launch, reason="MLX's CPU backend only")
def test_a_plain_engine_builds_its_kernels_before_traffic(tmp_path):
    """MLX builds each compiled CPU kernel (a g++ build, ~1 s) the first time it meets it and
    keeps it in $TMPDIR/mlx. In a child with an empty kernel cache, a plain engine's warm-up
    builds every kernel that traffic then uses: requests after it build none (before the
    warm-up ran plain rounds, the demo's no-drafter job paid those builds inside its timing)."""
    (tmp_path / "tmp").mkdir()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", KERNELS_PROBE], env=env, capture_output=True, text=True,
        timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["warm_up"], "the warm-up built no kernel"
    assert seen["after_traffic"] == seen["warm_up"], "traffic built kernels the warm-up had not"


@pytest.mark.parametrize("switch_s, expected", [(0.020, 0), (0.0005, 3)])
def test_a_change_of_depth_must_pay_for_its_switches_within_the_choice(switch_s, expected):
    """MLX CUDA, a small model at B=8: a plain round 1.5 ms, a depth-3 round 1.6 ms (launch-
    bound), 2.7 tokens a row at depth 3. Per round depth 3 is 1.7x ahead; but if a change of
    depth costs 20 ms (a graph rebuilt) and a choice lasts 8 rounds, going there and back costs
    more than the 8 rounds gain, so plain stays. At 0.5 ms a switch, depth 3 is taken."""
    p = DepthPolicy(max_depth=3, explore_every=0, extremes_only=True)
    p._probed.add(4)  # B=8's bucket: warmed
    ones = np.ones(8, dtype=np.int64)
    for k, t in ([(0, 0.0015)] * 6 + [(3, 0.0016)] * 6) * 2 + [(0, 0.0015)] * 6:
        first_after_change = p._last_k not in (-1, k)
        p.observe(ones * k, ones * k, t + (switch_s if first_after_change else 0.0))
    p._hit[:], p._tried[:] = [700.0, 600.0, 500.0], [1000.0, 700.0, 600.0]
    assert p.switch_cost() == pytest.approx(switch_s, rel=1e-6)
    assert p._rates(8)[3] > 1.5 * p._rates(8)[0]  # per round alone, depth 3 wins
    assert p.choose(8) == expected


def test_where_shapes_cost_builds_every_draining_size_is_built_and_nothing_taught(
    setup, monkeypatch
):
    """MLX CUDA: each new (batch size, depth) shape is a graph build (50-180 ms a drafting
    shape on an H200), and a draining batch passes through every size below its largest. The
    warm-up runs each of them at every depth the policy may choose, then the policy forgets
    those rounds but the shapes built (per-round costs there missed what a draining batch pays,
    and a warmed policy drafted where that lost: workers/warm_up.py); outputs still equal
    mlx-lm's."""
    from workers import warm_up as wu

    target, head = setup
    cuda_like = Backend(builds_per_shape=True, computes_in_launch=False)
    monkeypatch.setattr(wu.Backend, "current", classmethod(lambda cls: cuda_like))
    shapes: set[tuple[int, int]] = set()
    real_step = Engine.step

    def recording(self):  # type: ignore[no-untyped-def]
        if self.rows and self.depth_policy.forced is not None:  # the depth this round is held at
            shapes.add((len(self.rows), self.depth_policy.forced))
        return real_step(self)

    monkeypatch.setattr(Engine, "step", recording)
    kw = dict(max_batch_size=4, draft_depth=3, adaptive_depth=True, prefix_cache_tokens=256)
    engine = Engine(target, drafter=MTPDrafter(target, head), **kw)
    assert wu.warm_up(engine) == [4, 3, 2, 1]
    assert {(b, k) for b in (1, 2, 3, 4) for k in (0, 3)} <= shapes, sorted(shapes)
    policy = engine.depth_policy
    assert policy is not None and policy._rounds == 0 and not policy._probed
    assert policy.forced is None and policy.run == 4 and policy.extremes_only  # settings kept
    assert policy.cap_by_larger  # where each new shape is a build (the CPU's policy: off)
    # ... nor probes on traffic nor the job-end rule there (the CPU's policy: both on)
    assert not policy.live_probes and not policy.job_end
    assert all(policy._probe(b) is None for b in (1, 2, 3, 4))
    assert {(b, k) for b in (1, 2, 3, 4) for k in (0, 3)} <= policy._seen  # and what is built
    assert not policy._rows and not policy._tried.any()  # not what the rounds cost or accepted
    monkeypatch.setattr(Engine, "step", real_step)
    assert_no_trace_and_mlx_lm_outputs(engine, target, seed=7, label="MTP warmed")


def test_a_kv_budget_too_small_for_the_warm_up_rows_skips_what_does_not_fit(setup):
    target, head = setup
    kw = dict(drafter=MTPDrafter(target, head), draft_depth=3, adaptive_depth=True, warm_up=True)
    tiny = Engine(target, max_batch_size=4, kv_budget_tokens=120, **kw)  # < one warm-up row
    assert tiny.depth_policy is not None and not tiny.depth_policy._probed
    two_rows = Engine(target, max_batch_size=4, kv_budget_tokens=2 * 190, **kw)
    assert two_rows.depth_policy is not None and two_rows.depth_policy._probed == {1, 2}


def test_where_shapes_cost_builds_every_prefill_width_is_built_before_traffic(monkeypatch):
    """MLX CUDA: a prefill chunk pads to a multiple of the attention span, and a recurrent
    layer's kernel is built per window length, so a width first met on traffic compiled there
    (2.2-2.7 s for a warmed engine's first batched prefill, H200). The warm-up prefills one row
    at each width up to prefill_step_size (`prefill_widths`); outputs still equal mlx-lm's."""
    import workers.forward as forward
    import workers.kv_cache as kv_cache
    from workers import warm_up as wu

    cuda_like = Backend(builds_per_shape=True, computes_in_launch=False)
    # The warm-up's route, and spans rounded as on MLX CUDA (one class: patched everywhere)
    monkeypatch.setattr(kv_cache.Backend, "current", classmethod(lambda cls: cuda_like))
    target = tiny_model("qwen3_5", seed=5, layers=2)  # a recurrent layer and an attention one
    widths: list[int] = []
    real_pad = forward.pad_windows

    def recording(windows, width=1):  # type: ignore[no-untyped-def]
        tokens, valid = real_pad(windows, width)
        widths.append(tokens.shape[1])
        return tokens, valid

    monkeypatch.setattr(forward, "pad_windows", recording)
    engine = Engine(target, max_batch_size=2, prefill_step_size=384, max_context=1024)
    assert engine.cache.span == kv_cache.SPAN == 128
    widths.clear()
    assert wu.warm_up(engine) == [2, 1]
    assert {256, 384} <= set(widths), sorted(set(widths))  # 128: the rounds' own prompts
    assert max(widths) == 384  # none past the step size
    monkeypatch.setattr(wu, "WIDTHS_MAX", 1)  # a long step size builds at most this many more
    widths.clear()
    capped = Engine(target, max_batch_size=2, prefill_step_size=1024, max_context=2048)
    assert wu.warm_up(capped) == [2, 1] and set(widths) == {128, 256}, sorted(set(widths))
    monkeypatch.setattr(forward, "pad_windows", real_pad)
    assert_no_trace_and_mlx_lm_outputs(engine, target, seed=11, label="widths warmed")
