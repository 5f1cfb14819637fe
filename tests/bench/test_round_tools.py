"""bench/round_split.py and bench/p5_pairs.py on the embedded default model (CPU)."""

from __future__ import annotations

import time

import mlx.core as mx
import pytest

import workers.pipelined_rounds as rounds_module
import workers.prefill_job as prefill_job
from bench.p5_pairs import ab_row_linear
from bench.round_split import force_prefill_cut, instrument
from workers import Engine, SamplingParams, row_linear
from workers.compiled_step import COMPILE_ENV
from workers.pipeline import Flight

PROMPTS = [[5, 6, 7, 8, 9] * 4, [11, 12, 13] * 5, [20, 21] * 9]


def test_round_split_times_each_phase_and_parts_within_the_wall():
    engine = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=2)
    sp = SamplingParams(max_tokens=6, ignore_eos=True)
    originals = (mx.async_eval, mx.eval, rounds_module.greedy_outcome, Flight.read_back)
    split = instrument(engine, parts=True)
    try:
        t0 = time.perf_counter()
        engine.generate(PROMPTS, [sp] * len(PROMPTS))
        wall = time.perf_counter() - t0
    finally:
        split.restore()
    # Nothing stays patched for the process's later engines (the wrappers once leaked into
    # every later test: extra evaluations inside the rounds they built).
    assert (mx.async_eval, mx.eval, rounds_module.greedy_outcome, Flight.read_back) == originals
    assert "_launch" not in vars(engine) and "commit_lazy" not in vars(engine.cache)
    got = split.seconds
    for phase in ("_launch", "_forward", "_draft", "_admit", "dispatch:_forward",
                  "dispatch:_draft", "async_eval (MLX encoding and launching)",
                  "admit: Prefill.advance", "admit: drafter.add_rows"):  # fmt: skip
        assert got[phase] > 0, phase
    # The host phases of a step do not overlap: together they fit in the wall time.
    assert got["_launch"] + got["_collect"] + got["_admit"] <= wall


def test_ab_row_linear_switches_the_route_in_place_and_back_on(monkeypatch):
    monkeypatch.setenv(COMPILE_ENV, "1")
    monkeypatch.setenv(row_linear.ENV, "1")
    plain = Engine.load(max_batch_size=2)
    mtp = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=2)
    seen = []
    real = row_linear.remove

    def removed(model):  # type: ignore[no-untyped-def]
        real(model)
        seen.append(any(type(m) is row_linear.RowLinear for _, m in model.named_modules()))

    monkeypatch.setattr(row_linear, "remove", removed)
    sp = SamplingParams(max_tokens=4, ignore_eos=True)
    out = ab_row_linear(plain, mtp, PROMPTS[:2], sp, pairs=1)
    assert seen and not any(seen), "the off state must leave no routed layer"
    assert set(out["summary"]) == {
        "plain_on_over_off", "mtp_on_over_off", "mtp_over_plain_off", "mtp_over_plain_on"
    }  # fmt: skip
    assert all(v > 0 for v in out["summary"].values())
    # It ends on: the engines as MLX CUDA runs them, each state with its own traces.
    assert any(type(m) is row_linear.RowLinear for _, m in mtp.model.named_modules())
    assert mtp.drafter.compiled is not None


def test_ab_row_limits_sets_each_states_limits_and_restores_the_defaults(monkeypatch):
    import bench.p5_pairs as p5

    monkeypatch.setenv(row_linear.ENV, "1")
    plain = Engine.load(max_batch_size=2)
    mtp = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=2)
    default = (row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX)
    off, on = p5.parse_row_limits("32:inf,64:48")
    assert off == (32, float("inf")) and on == (64, 48 << 20)
    seen = []

    def timed(engine, prompts, sp):  # type: ignore[no-untyped-def]
        seen.append((row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX))
        return {"tokens_per_s": 1.0}

    monkeypatch.setattr(p5, "timed_pass", timed)
    out = p5.ab_row_linear(plain, mtp, PROMPTS[:1], SamplingParams(max_tokens=2), 2, (off, on))
    # warm (off, on), then two pairs, the second in the other order: each state a plain pass
    # and an MTP pass
    assert seen == [off, off, on, on] * 2 + [on, on, off, off]
    assert out["summary"]["mtp_on_over_off"] == 1.0
    assert (row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX) == default
    assert any(type(m) is row_linear.RowLinear for _, m in mtp.model.named_modules())
    with pytest.raises(SystemExit, match="--ab-row-limits='64'"):
        p5.parse_row_limits("64")


def test_ab_join_wait_sets_each_states_wait_on_both_engines(monkeypatch):
    import bench.p5_pairs as p5

    plain = Engine.load(max_batch_size=2)
    mtp = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=2)
    assert p5.parse_join_waits("0,8") == (0, 8)
    seen = []

    def timed(engine, prompts, sp):  # type: ignore[no-untyped-def]
        seen.append((engine is mtp, engine.join_gate.max_wait_steps))
        return {"tokens_per_s": 2.0 if engine.join_gate.max_wait_steps else 1.0}

    monkeypatch.setattr(p5, "timed_pass", timed)
    out = p5.ab_join_wait(plain, mtp, PROMPTS[:1], SamplingParams(max_tokens=2), 2, (0, 8))
    off, on = [(False, 0), (True, 0)], [(False, 8), (True, 8)]
    assert seen == off + on + on + off  # the second repeat in the other order
    assert out["summary"]["mtp_on_over_off"] == 2.0 and out["summary"]["plain_on_over_off"] == 2.0
    for bad in ("8", "0,-1", "a,b"):
        with pytest.raises(SystemExit, match="--ab-join-wait="):
            p5.parse_join_waits(bad)


def test_force_prefill_cut_reaches_every_prefill_the_engine_starts(monkeypatch):
    monkeypatch.setattr(prefill_job, "Prefill", prefill_job.Prefill)  # restored after the test
    cuts = []
    real = prefill_job.Prefill.advance

    def advance(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        cuts.append(self.cut_at_window)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(prefill_job.Prefill, "advance", advance)
    engine = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=2)
    sp = SamplingParams(max_tokens=3, ignore_eos=True)
    for cut in (False, True):
        cuts.clear()
        force_prefill_cut(cut)
        engine.generate(PROMPTS, [sp] * len(PROMPTS))
        assert cuts and set(cuts) == {cut}


def test_baseline_runs_on_the_linears_mlx_lm_built():
    """workers.routes.as_mlx_lm_built (bench.engine's baselines run in it) undoes the engine's
    routes for a baseline, then restores."""
    import mlx.nn as nn

    from workers import cpu_ops, row_linear
    from workers.routes import as_mlx_lm_built

    small, other = nn.Linear(64, 96, bias=False), nn.Linear(64, 96, bias=False)
    biased, norm = nn.Linear(64, 96), nn.RMSNorm(96)
    tree = nn.Sequential(small, other, biased, norm)
    assert row_linear.install(tree) == 2
    assert row_linear.install_views(tree) == 1 and cpu_ops.install(tree) == 1
    with as_mlx_lm_built(tree):
        assert [type(m) for m in (small, other, biased)] == [nn.Linear] * 3
        assert type(norm) is nn.RMSNorm
    assert type(small) is row_linear.RowLinear and type(other) is row_linear.RowLinear
    assert type(biased) is row_linear.ViewLinear and type(norm) is cpu_ops.ViewRMSNorm


def test_shape_ceiling_builds_the_shape_asked_and_reports_its_ceiling(tmp_path, monkeypatch):
    """bench/shape_ceiling.py on a tiny shape: the target has the layers and width asked, the
    head is one layer of that width, and each ceiling is T * step / (verify + k * head)."""
    import json
    import sys

    from bench import shape_ceiling

    model, head, params = shape_ceiling.build(3, 64, 128)
    assert len(model.layers) == 3 and model.args.hidden_size == 64
    assert len(head.layers) == 1 and head.args.hidden_size == 64 and params > 0
    out = tmp_path / "c.json"
    monkeypatch.setattr(sys, "argv", ["x", "--shapes", "2x64x128", "--repeats", "1",
                                      "--out", str(out)])  # fmt: skip
    shape_ceiling.main()
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["layers"], row["hidden"], row["mlp"]) == (2, 64, 128)
    for k, T in shape_ceiling.TOKENS_PER_ROUND.items():
        cost = row[f"verify{k + 1}_over_step"] + k * row["head_over_step"]
        assert abs(row[f"ceiling_depth{k}"] - T / cost) < 0.01


def test_the_step_log_records_every_step_and_what_it_prefilled():
    from bench.step_log import log_steps
    from tests.tiny import mixed_prompts, tiny_model

    engine = Engine(tiny_model("qwen3", seed=5, layers=2), max_batch_size=1)
    prompts = mixed_prompts(2, seed=2)
    steps = log_steps(engine)
    outs = engine.generate(prompts, [SamplingParams(max_tokens=6)] * 2)
    del engine.step
    assert engine.step.__func__ is Engine.step  # the class's method again
    assert steps[-1].rows == 0 and all(len(o.tokens) == 6 for o in outs)
    stats = engine.take_round_stats()
    assert len(steps) >= len(stats) > 0 and all(s.seconds > 0 for s in steps)  # a step may end none
    assert sum(s.prefill_tokens for s in steps) == sum(x.num_prefill_tokens for x in stats) > 0
    assert sum(1 for s in steps if s.prefill_tokens) >= 2  # the second prompt joins later
    assert all(s.prefilled for s in steps if s.prefill_tokens)
    # a prompt prefilled in chunks while a row decodes: its first chunks end no round's stats
    engine = Engine(tiny_model("qwen3", seed=5, layers=2), max_batch_size=2, prefill_step_size=8)
    steps = log_steps(engine)
    engine.generate([prompts[0], list(range(1, 40))], [SamplingParams(max_tokens=12)] * 2)
    chunked = [s for s in steps if s.prefilled and not s.prefill_tokens]
    assert chunked, "a step that only advanced a chunk must count as a prefill step"


def test_policy_variants_set_what_they_name():
    """bench.p5_pairs --ab-policy's variants: each sets its policy before any live round; the
    job-end rule restricted to the drain passes a view on only where the queue fits the free
    slots; an unknown name is refused with the known ones."""
    import numpy as np
    import pytest

    from bench.p5_pairs import POLICY_VARIANTS, ab_policy
    from workers.depth_policy import DepthPolicy
    from workers.drain import DrainingRows

    def view(waiting: int, free: int) -> DrainingRows:
        return DrainingRows(np.ones(2), np.zeros(2), np.zeros(2), np.ones(waiting), free)

    views = iter([view(3, 1), view(2, 2), None])
    policy = DepthPolicy(max_depth=3, job_view=lambda: next(views))
    POLICY_VARIANTS["job_end_drain_only"](policy)  # type: ignore[misc]
    assert policy.job_view is not None
    assert policy.job_view() is None  # 3 waiting, 1 free slot: tokens per second decide
    assert len(policy.job_view().waiting) == 2  # 2 waiting, 2 free: the drain
    assert policy.job_view() is None
    for name, setting in (("no_job_end", "job_view"), ("margin_min", "error_sigmas"),
                          ("no_cap", "cap_by_larger"), ("no_explore", "explore_every"),
                          ("no_hold", "hold_depth"), ("no_rerun", "probe_rerun")):  # fmt: skip
        p = DepthPolicy(max_depth=3, job_view=lambda: None, cap_by_larger=True, hold_depth=True)
        POLICY_VARIANTS[name](p)  # type: ignore[misc]
        assert not getattr(p, setting), name
    cuda = DepthPolicy(max_depth=3, live_probes=False, job_end=False)  # MLX CUDA's settings
    POLICY_VARIANTS["probing"](cuda)  # type: ignore[misc]
    assert cuda.live_probes and cuda.job_end and cuda._probe(16) == 0  # the policy before
    forced = DepthPolicy(max_depth=3)
    POLICY_VARIANTS["forced_max"](forced)  # type: ignore[misc]
    assert forced.choose(16) == 3 and forced.choose(1) == 3
    POLICY_VARIANTS["refresh_32"](forced)  # type: ignore[misc]
    assert forced.refresh_every == 32
    with pytest.raises(SystemExit, match="unknown variants \\['nope'\\]"):
        ab_policy(None, [], [], 1, ["as_is", "nope"])
    # An engine-setting variant reaches `make`; the others build the served engine.
    made = []

    def make(mtp: bool, adaptive: bool = True, **config: object) -> Engine:
        made.append((mtp, adaptive, config))
        return Engine.load(max_batch_size=2, **({"drafter": "mtp", "adaptive_depth": True,
                                                 **config} if mtp else {}))  # fmt: skip

    ab_policy(make, PROMPTS[:1], [SamplingParams(max_tokens=2)], 1, ["verify_64", "as_is"])
    assert made == [(False, True, {}), (True, True, {"max_verify_tokens": 64}), (True, True, {})]


def test_ab_passes_take_turns_so_no_variant_always_runs_first(monkeypatch):
    """Each repeat rotates the order of the variants (and of off / on) by a place, and each
    variant's ratio is to the plain pass just before its own MTP pass."""
    import bench.p5_pairs as p5

    assert [p5.rotated(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]  # fmt: skip
    order, calls = [], [0]

    def timed(engine, prompts, sp):  # type: ignore[no-untyped-def]
        order.append(engine.tag)
        calls[0] += 1  # every pass its own rate: a ratio to the wrong plain pass shows
        return {"tokens_per_s": float(calls[0])}

    monkeypatch.setattr(p5, "timed_pass", timed)
    variants = 0

    def tagged(mtp: bool, adaptive: bool = True, **config: object):  # type: ignore[no-untyped-def]
        nonlocal variants
        engine = Engine.load(max_batch_size=2, **({"drafter": "mtp", "adaptive_depth": True,
                                                   **config} if mtp else {}))  # fmt: skip
        engine.tag = f"v{variants}" if mtp else "plain"  # type: ignore[attr-defined]
        variants += mtp
        return engine

    out = p5.ab_policy(tagged, PROMPTS[:1], [SamplingParams(max_tokens=2)], 2, ["as_is", "lean"])
    assert order == ["plain", "v0", "plain", "v1", "plain", "v1", "plain", "v0"]
    # passes 1-8: as_is 2/1 then 8/7, lean 4/3 then 6/5
    assert out["pairs"] == {"as_is": [2.0, round(8 / 7, 3)], "lean": [round(4 / 3, 3), 1.2]}


def test_ab_launch_takes_turns_with_each_mtp_pass_after_its_plain_pass(monkeypatch):
    import bench.p5_pairs as p5

    names = iter(["plain_off", "mtp_off", "plain_on", "mtp_on"])  # ab_launch's build order
    order = []

    def make(mtp: bool):  # type: ignore[no-untyped-def]
        engine = Engine.load(max_batch_size=2, **({"drafter": "mtp"} if mtp else {}))
        engine.tag = next(names)  # type: ignore[attr-defined]
        return engine

    def timed(engine, prompts, sp):  # type: ignore[no-untyped-def]
        order.append(engine.tag)
        return {"tokens_per_s": 1.0}

    monkeypatch.setattr(p5, "timed_pass", timed)
    p5.ab_launch(make, PROMPTS[:1], [SamplingParams(max_tokens=2)], 2)
    assert order == ["plain_off", "mtp_off", "plain_on", "mtp_on",
                     "plain_on", "mtp_on", "plain_off", "mtp_off"]  # fmt: skip


def test_step_kernels_splits_device_time_by_step_class():
    from bench.step_kernels import busy_us, step_classes, summarise

    assert step_classes([False, True, False, False, True, True, False]) == [
        "round", "join", "after_join", "round", "join", "join", "after_join",
    ]  # fmt: skip
    assert busy_us([(0, 10), (5, 15), (20, 25)]) == 20  # overlaps count once

    def mark(name: str, ts: float, dur: float, cat: str = "user_annotation") -> dict:
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat}

    trace = {"traceEvents": [
        mark("specfleet_step", 0, 100), mark("specfleet_step", 100, 1000),
        mark("specfleet_step", 1100, 100),
        mark("specfleet_step", 0, 100, "gpu_user_annotation"),  # torch's device copy: not host
        mark("_admit", 110, 600), mark("_admit", 110, 600, "gpu_user_annotation"),
        mark("_launch", 1050, 100),  # half in the join, half in the last round
        mark("k_round", 10, 20, "kernel"), mark("k_round", 90, 20, "kernel"),  # 10 us in each
        mark("k_prefill", 200, 300, "kernel"), mark("k_prefill", 300, 100, "kernel"),
        mark("k_round", 1150, 10, "kernel"),
        mark("cudaGraphLaunch", 120, 30, "cuda_runtime"),
        {"ph": "i", "name": "not a span", "ts": 50},
    ]}  # fmt: skip
    out = summarise(trace, ["round", "join", "round"], top=5)
    rounds, join = out["round"], out["join"]
    assert rounds["steps"] == 2 and rounds["wall_ms_per_step"] == 0.1
    assert rounds["device_busy_ms_per_step"] == 0.02  # (20 + 10 of 90..110) + 10, over 2 steps
    assert rounds["kernel_starts_per_step"] == 1.5
    assert rounds["host_parts_ms_per_step"] == {"_launch": 0.025}
    assert join["device_busy_ms_per_step"] == 0.31  # 100..110 of the round's, then 200..500
    assert join["kernel_starts_per_step"] == 2  # the ones that started in it
    assert join["host_parts_ms_per_step"] == {"_admit": 0.6, "_launch": 0.05}
    assert join["api_ms_per_step"] == [("cudaGraphLaunch", 0.03)]
    assert dict(join["kernels_ms_per_step"]) == {"k_prefill": 0.4, "k_round": 0.01}
    assert dict(join["starts_per_step_by_kernel"]) == {"k_prefill": 2.0}
