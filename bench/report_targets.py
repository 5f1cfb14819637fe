"""RESULTS.md's first section: issue 11's speed targets, each read from the newest result that
measures it (bench/results/s29/ to s38/README.md and their siblings say how each was run); a target's status is computed from those numbers."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from math import nan
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
BG, PLAIN = "mlx_lm_batch_generator", "specfleet_plain"
# workers/launch.py's ROWS_MIN from stop 32 to stop 54: rounds of this many rows launched from
# the launcher thread. The `--ab-launch` files of those stops are read as their engines served:
# the launcher's side from here up, the other below. Since stop 55 every round launches there.
LAUNCH_ROWS_MIN_S32_S54 = 8


def _load(rel: str) -> Any:
    path = RESULTS / rel
    return json.loads(path.read_text()) if path.exists() else None


def _json_lines(rel: str) -> list[dict]:
    """The JSON objects a device job printed one a line (its log, as the run tool returned it)."""
    path = RESULTS / rel
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(x) for x in lines if x.startswith("{")]


def _engine(data: dict | None, Bs: tuple[str, ...], name: str, base: str) -> list[float]:
    rows = (data or {}).get("batch", {}).get("T=0.0", {})
    return [rows[b][name]["tokens_per_s"] / rows[b][base]["tokens_per_s"] for b in Bs if b in rows]


# The newest `bench.gpu` run of the 6.6B (s36: after stop 35's settle change; stop 33's card,
# `--ab-launch`, read efficiency 0.65 / 1.08 / 0.66, stop 32's 0.80 at B = 32).
GPU_6B = "s36/device/gpu_6b_s36_h200.json"


def _served_gpu(
    data: dict | None, measure: str, launch_ab: bool = True, off_side: bool = False
) -> list[float]:
    """P1 ("plain") or P2 ("forced") per batch size of a `bench.gpu` file, as the engine of its
    stop ran: with `--ab-launch` (stops 32-54), the launcher thread's side at
    LAUNCH_ROWS_MIN_S32_S54 rows or more and the other below; without (or `launch_ab` False: a
    later stop's A/B of another route, whose on side is its tree), its only side; `off_side`: an
    A/B of a route its stop did not adopt, whose off side is its tree."""
    if not data:
        return []
    rows = next(iter(data["models"].values()))["rows"]
    out = []
    for b in sorted(rows, key=int):
        runs, r = rows[b]["tokens_per_s_each_pass"], rows[b]
        off = f"{measure}_off"
        below = launch_ab and int(b) < LAUNCH_ROWS_MIN_S32_S54
        side = off if (off_side or below) and off in runs else measure
        ratio = statistics.median(runs[side]) / statistics.median(runs["bg"])
        out.append(ratio if measure == "plain" else ratio / r["tokens_per_round"])
    return out


def _merged(*files: dict | None) -> dict | None:
    """The presets of several `bench.gpu` files (one run a preset) as one file's."""
    models = {k: v for d in files if d for k, v in d["models"].items()}
    return {"models": models} if models else None


def _model(data: dict | None, name: str) -> dict | None:
    """One model's part of a `bench.gpu` file that ran several presets."""
    models = (data or {}).get("models", {})
    return {"models": {name: models[name]}} if name in models else None


def _served_p5(data: dict | None) -> list[float]:
    """MTP ÷ plain per batch size of a `bench.p5_pairs --ab-launch` file (stop 32), as stops
    32-54 served it."""
    batch = (data or {}).get("batch", {})
    sizes = sorted((k.split()[0] for k in batch), key=int)
    return [
        batch[f"{b} launch"]["summary"][
            "mtp_over_plain_" + ("on" if int(b) >= LAUNCH_ROWS_MIN_S32_S54 else "off")
        ]
        for b in sizes
    ]


def _each(pattern: str, names: list[str], read: Callable[[dict, str], float]) -> list[float]:
    """`read(data, name)` of each file `pattern` names (a name fills it); a missing file is nan,
    which says so in the figure instead of shifting the rest."""
    out = []
    for name in names:
        data = _load(pattern.format(name))
        out.append(read(data, name) if data else nan)
    return out


def _ratios(pattern: str, runs: list[str]) -> list[float]:
    """MTP ÷ plain medians of bench.p5_pairs files, one run of one batch size each."""
    return _each(
        pattern, runs, lambda d, _: next(iter(d["batch"].values()))["mtp_over_plain_median"]
    )


def _policy(pattern: str, sizes: list[str], variant: str) -> list[float]:
    """A variant's MTP ÷ plain median per batch size of `bench.p5_pairs --ab-policy` files."""
    return _each(pattern, sizes, lambda d, b: d["batch"][f"{b} policy"]["summary"][variant])


def _fmt(xs: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in xs) or "n/a"


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f}" if xs else "n/a"


def _status(xs: list[float], floor: float) -> str:
    xs = [x for x in xs if x == x]  # a missing run (nan) neither meets nor misses
    if not xs:
        return "not measured"
    missed = sum(x < floor for x in xs)
    return "met" if not missed else f"missed in {missed} of {len(xs)} (below {floor})"


def targets_section() -> list[str]:
    cpu, real = _load("engine_cpu.json"), _load("s28/engine_real_cpu.json")
    ab = _load("s28/cpu_ops_ab_cpu.json")
    g6 = _load(GPU_6B)
    g1, g1_b1 = _load("s32/gpu_launch_ab_1b_h200.json"), _load("s32/gpu_launch_ab_1b_b1_h200.json")
    # later stops' trees, each a fresh machine, `bench.gpu` at B = 1 / 8 / 32 (both presets)
    stops = {
        "51": _load("s51/device/gpu_h200.json"),
        "52": _load("s52/device/gpu_h200.json"),  # before its attention change (ecea926)
        "53": _load("s53/device/gpu_fixed_h200.json"),  # a window's keys read once, skinny on
        "55": _load("s55/gpu_final_h200.json"),  # every round from the launcher thread
        "62": _load("s63/device/gpu_p1p2_h200.json"),  # 4718c56, s63's first machine
        # q, k, v stacked (workers/stacked_linears.py's first form), s63's third machine (the
        # slowest reading of the route; its second machine read 0.97-1.55)
        "63 (q/k/v)": _load("s63/device/gpu_fused_ab3_h200.json"),
        "63": _load("s63/device/gpu_stacked_ab_h200.json"),  # q, k, v and gate, up stacked
        # custom kernels called through compiled traces: the off sides of two A/Bs of the wide
        # skinny route (not adopted), B = 1 / 8 only
        "64": (_load("s64/device/gpu_skinny_wide_ab_h200.json"), True),
        "64 (2nd run)": (_load("s64/device/gpu_skinny_wide_ab2_h200.json"), True),
        # stop 65's tree on an H100: the off sides (one round in flight, the default) of an A/B
        # against two rounds in flight (`--ab-deep`, not adopted), B = 1 / 8 / 32
        "65": (
            _merged(
                _load("s66/device/gpu_deep_ab_6b_h100.json"),
                _load("s66/device/gpu_deep_ab_1b_h100.json"),
            ),
            True,
        ),
    }
    cards = {"65": "H100"}  # the card of a stop's run where it was not an H200
    # the newest trees' demo runs (s50: rows join and leave the running cache in place; 8 runs
    # on 2832b19, 5 on the review mend's tree, 6 on stop 51's final tree; kernel cache warm). s49's (a plain engine builds MLX's CPU kernels in its
    # warm-up) read 0.93 / 1.86; s48's batch-job medians counted cold runs' inflated ratios.
    demo_runs = [
        {**r, "tree": "after"}
        for f in (
            "s50/demo_runs.json",
            "s50/demo_runs_2.json",
            "s50/demo_runs_final.json",
            "s51/demo_runs.json",  # stop 51's final tree (the split: the same rounds)
            "s52/demo_runs.json",  # stop 52's (files split, a CUDA kernel: the same rounds)
            "s54/cpu/demo_runs.json",  # stop 54's (stop 53's engine: CUDA-only changes)
            "s64/cpu/demo_runs.json",  # stop 64's (CUDA-only changes; CPU path as before)
            "s65/cpu/demo_runs.json",  # stop 65's (the same engine)
            "s66/cpu/demo_runs.json",  # stop 66's (the same engine)
        )
        for r in (_load(f) or {}).get("runs", [])
    ]
    bg_b1 = _load("s48/bg_b1_cpu.json")  # MTP and BatchGenerator at B = 1 in turns
    p5, p5a = _load("s32/p5_launch_ab_h200.json"), _load("s32/p5_launch_ab_adaptive_h200.json")
    # The same model as traffic ends apart (s34: 64 prompts, 48-144 tokens each; B = 8, 16)
    spread = [_load(f"s34/p5_pairs_64p_spread_{c}_s34_h200.json") for c in ("d3", "adaptive")]
    p5_spread = [[d["batch"][b]["mtp_over_plain_median"] for b in ("8", "16")] if d else []
                 for d in spread]  # fmt: skip
    # ... with the engine settling only where the batch changes (s35, B = 8, depth 3)
    before, after = (
        _load(f"s35/p5_pairs_d3_settle_fixed_{t}_s35_h200.json") for t in ("before", "after")
    )
    p5_settled = [after["batch"]["8"]["mtp_over_plain_median"]] if after else []
    # s36 (71fe306): P5 as defined, a closed batch of 64 prompts x 96 tokens
    closed = [_load(f"s36/device/p5_{c}_64p_s36_h200.json") for c in ("fixed", "adaptive")]
    p5_closed = [[d["batch"][b]["mtp_over_plain_median"] for b in ("1", "8", "16")] if d else []
                 for d in closed]  # fmt: skip
    # s37: served traffic again on a newly trained hybrid of the same recipe, the launch-wait
    # accounting reverted (B = 8 / 16): fixed depth 3, then adaptive (3995143's accounting)
    p5_s37 = [
        _ratios("s37/device/served_depth3_b{}.json", ["8", "16"]),
        _ratios("s37/device/accounting_before_b{}.json", ["8_1", "8_2", "16"]),
        _ratios("s37/device/margin_after_b{}.json", ["8", "16"]),  # 97ab79e: capped margins
    ]
    # s38: adaptive (as is) and fixed depth 3 in one process, each pass after a plain pass
    # (bench.p5_pairs --ab-policy; B = 8 / 16, the newer of the two runs at each)
    p5_s38 = [_policy("s38/device/variants_c_b{}.json", ["8", "16"], k) for k in ("as_is", "fixed")]
    # s39: adaptive holding a drafted depth (hold_depth) and fixed depth 3, in one process
    # (B = 8 / 16): served traffic, then the closed batch
    p5_s39 = [
        _policy(f"s39/device/{run}_b{{}}.json", ["8", "16"], k)
        for run in ("variants_c", "closed") for k in ("as_is", "fixed")
    ]  # fmt: skip
    # s40: MLX's default CUDA graph settings, B = 16, adaptive (each process a plain and an MTP
    # pass in 4 pairs): the closed batch, then served traffic
    p5_s40 = [
        d["batch"]["16"]["mtp_over_plain_median"]
        for c in ("0", "0.5")
        if (d := _load(f"s40/device/graphs/graphs2_base_s{c}.json"))
    ]
    # s41: rows leaving and joining without a settle (a718623's first form f16b470), adaptive,
    # each process a plain and an MTP pass in 3 pairs: served B = 1 / 4 (16 prompts), 8 / 16,
    # then the closed batch at 8 / 16; and the final form's on-side (job e, B = 16, in one
    # process with the old code in turns): closed batch, served
    p5_s41 = [
        d["batch"][b]["mtp_over_plain_median"]
        for f, bs in (("served_b1_4", ("1", "4")), ("served_b8_16", ("8", "16")),
                      ("closed_b8_16", ("8", "16")))
        if (d := _load(f"s41/device/p5/p5_{f}.json"))
        for b in bs
    ]  # fmt: skip
    p5_s41_final = [
        d["batch"]["16 join"]["summary"]["mtp_over_plain_on"]
        for c in ("0", "0.5")
        if (d := _load(f"s41/device/join_final/join_final_s{c}.json"))
    ]
    # s46: adaptive at the served depth cap (4), each batch size in one process with plain
    # (device/depth_caps_gpu.py): job a at B = 1 / 4, job b (MLX defaults) at B = 1 / 4 / 16
    p5_s46 = [
        row["mtp_over_plain_median"]["cap4"]
        for job in ("a", "b")
        for row in _json_lines(f"s46/device/job_s46{job}.log")
    ]
    # s54: the same at cap 4 on a hybrid trained again (stop 37's recipe), two engines of each
    # kind in one process (device/skinny_p5_gpu.py: skinny on and off, an A/A on this model,
    # whose linears are all row_linear's): per copy, B = 1 / 4 / 16
    p5_s54 = [
        [row["p5_mtp_over_plain"][copy] for f in ("b1_4", "b16")
         for row in _json_lines(f"s54/device/skinny_p5_{f}_h200.jsonl")]
        for copy in ("skinny_on", "skinny_off")
    ]  # fmt: skip
    # s56: this tree (every round from the launcher thread), the hybrid trained again, adaptive
    # up to 4 as a worker serves, one process per B (bench.p5_pairs): B = 1 (8 pairs), 4, 8, 16
    p5_s56 = [
        d["batch"][b]["mtp_over_plain_median"]
        for f, b in (("b1_8pairs", "1"), ("b4", "4"), ("b8", "8"), ("b16_rows128", "16"))
        if (d := _load(f"s56/p5_{f}.json"))
    ]
    # s57: the same (served, adaptive up to 4) at B = 8 / 16 with row_linear's rows x bytes
    # bound; then adaptive up to 3 and depth 3 held, each after a plain pass in one process
    p5_s57 = [
        d["batch"][b]["mtp_over_plain_median"]
        for f, b in (("b8_limits", "8"), ("b16_limits", "16"))
        if (d := _load(f"s57/p5_{f}.json"))
    ]
    p5_s57_policy = [
        [d["batch"][f"{b} policy"]["summary"][v] for b in (8, 16)
         if (d := _load(f"s57/policy_b{b}_d3.json"))]
        for v in ("as_is", "fixed")
    ]  # fmt: skip
    # s60: the serving policy as landed in stop 59 (MLX CUDA: no live probes, no job-end
    # rule), each MTP pass after a plain pass in one process, 6-10 pairs (B = 1 / 4 / 8 / 16);
    # then the policy before it (`probing`) in the same runs (B = 4 / 8 / 16)
    s60 = [d["batch"][f"{b} policy"]["summary"] for b in (1, 4, 8, 16)
           if (d := _load(f"s60/device/policy_s60_default_b{b}.json"))]  # fmt: skip
    p5_s60 = [x["as_is"] for x in s60]
    p5_s60_probing = [x["probing"] for x in s60 if "probing" in x]
    # stop 65's tree on an H100, the hybrid trained again, one process per B (bench.p5_pairs)
    p5_s66 = _ratios("s66/device/p5_s66_{}_h100.json", ["b1", "b4", "b8", "b16"])
    eff6_s41 = _served_gpu(_load("s41/device/gpu6b/gpu_6b_base.json"), "forced")  # B = 1, 8
    settle_gain = (  # after ÷ before, medians of tokens/s: plain, then MTP
        [statistics.median(after["batch"]["8"][k]) / statistics.median(before["batch"]["8"][k])
         for k in ("plain_tokens_per_s", "mtp_tokens_per_s")]
        if before and after else []
    )  # fmt: skip
    cpu_p1 = (
        [ab["summary"][f"B={b}"]["plain_on_over_batch_generator"] for b in (1, 8)] if ab else []
    )
    real_p1 = _engine(real, ("1", "8"), PLAIN, BG)
    p1_6, p1_1 = (
        _served_gpu(g6, "plain"),
        _served_gpu(g1_b1, "plain") + _served_gpu(g1, "plain")[1:],
    )
    # per stop: [6.6B, 0.87B] lists of P1 ("plain") or P2 ("forced") per batch size
    by_stop = {
        measure: {
            s: [_served_gpu(_model(g, m), measure, int(s[:2]) < 55, off) for m in ("6b", "1b")]
            for s, (g, off) in ((s, g if isinstance(g, tuple) else (g, False))
                                for s, g in stops.items())
        }
        for measure in ("plain", "forced")
    }  # fmt: skip

    def stops_text(measure: str) -> str:
        return "; ".join(
            f"stop {s}'s tree, {cards.get(s, 'H200')} 6.6B {_fmt(big)}, 0.87B {_fmt(small)} "
            f"({'B=1 / 8 / 32' if len(big) == 3 else 'B=1 / 8'})"
            for s, (big, small) in by_stop[measure].items()
        )

    later_p1 = [x for pair in by_stop["plain"].values() for xs in pair for x in xs]
    later_eff = [xs for pair in by_stop["forced"].values() for xs in pair]
    gpu_p1 = p1_6 + p1_1 + later_p1
    eff6 = _served_gpu(g6, "forced")  # B = 1, 8, 32
    eff1 = _served_gpu(g1_b1, "forced") + _served_gpu(g1, "forced")[1:]  # B = 1, 8
    runs = [r for r in demo_runs if r["tree"] == "after"]
    single, batch = [r["single_stream"] for r in runs], [r["batch_job"] for r in runs]
    in_proc = [bg_b1["mtp_over_batch_generator"]] if bg_b1 else []
    slow = _engine(cpu, ("1", "4", "8"), "specfleet_slow_draft_adaptive", PLAIN)
    p4 = _load("s31/p4_pairs_cpu.json")  # bench/p4_pairs.py: turn-taking pairs, medians
    slow_pairs = [
        p4["batch"][b]["slow_adaptive_over_plain_median"]
        for b in ("1", "4", "8")
        if p4 and b in p4["batch"]
    ]
    p2 = [e for effs in (eff6, eff1, *later_eff) for e in effs[:2]]  # B <= 8
    p2_32 = [effs[2] for effs in (eff6, eff1, *later_eff) if len(effs) > 2]
    rows = [
        ("P1", "plain ÷ BatchGenerator ≥ 1.00",
         f"CPU default model {_fmt(cpu_p1)} (B=1 / 8, medians of 5 passes); real SmolLM2-135M "
         f"{_fmt(real_p1)} (B=1 / 8); H200 6.6B {_fmt(p1_6)} (B=1 / 8 / 32), "
         f"0.87B {_fmt(p1_1)} (B=1 / 8); {stops_text('plain')}",
         _status(cpu_p1 + real_p1 + gpu_p1, 1.0)),
        ("P2", "efficiency ≥ 0.90 at B ≤ 8, ≥ 0.75 at B = 32",
         f"H200 6.6B {_fmt(eff6)} (B=1 / 8 / 32), 0.87B {_fmt(eff1)} (B=1 / 8); 6.6B again "
         f"(s41, B=1 / 8) {_fmt(eff6_s41)}; {stops_text('forced')}",
         f"B ≤ 8: {_status(p2 + eff6_s41, 0.90)}; B = 32: {_status(p2_32, 0.75)}"),
        ("P3", "demo: single stream ≥ 1.8, batch job ≥ 1.2; in process MTP ÷ BatchGenerator "
         "at B=1 ≥ 1.8",
         f"demo single stream {_fmt(single)} (median {_median(single)}), batch job "
         f"{_fmt(batch)} (median {_median(batch)}); in process, adaptive up to 5, in turns "
         f"(8 prompts x 3) {_fmt(in_proc)}",
         f"single: median {_median(single)}, each run {_status(single + in_proc, 1.8)}; "
         f"batch: median {_median(batch)}, {_status(batch, 1.2)}"),
        ("P4", "a drafter that does not pay, adaptive ÷ plain ≥ 0.97",
         f"4-bit draft model on the CPU, B=1 / 4 / 8: medians of turn-taking pairs "
         f"{_fmt(slow_pairs)} (bench/p4_pairs.py); one pass each (bench/engine.py): "
         f"{_fmt(slow)}", _status(slow_pairs or slow, 0.97)),
        ("P5", "hybrid MTP ÷ plain ≥ 1.5 at B = 1-16",
         f"H200 trained hybrid, depth 3: {_fmt(_served_p5(p5))}; adaptive depth as a worker "
         f"serves: {_fmt(_served_p5(p5a))} (B=1 / 4 / 8 / 16; medians of 3 pairs); as served "
         f"traffic ends apart (64 prompts of 48-144 tokens, s34): depth 3 {_fmt(p5_spread[0])}, "
         f"adaptive {_fmt(p5_spread[1])} (B=8 / 16); the engine settling only where the batch "
         f"changes (s35, B=8): depth 3 {_fmt(p5_settled)}, plain / MTP {_fmt(settle_gain)}x as fast "
         f"as before it; a closed batch of 64 prompts (s36, B=1 / 8 / 16): depth 3 "
         f"{_fmt(p5_closed[0])}, adaptive {_fmt(p5_closed[1])}; served again on a new "
         f"hybrid of the same recipe (s37, B=8 / 16): depth 3 {_fmt(p5_s37[0])}, adaptive "
         f"{', '.join(f'{x:.2f}' for x in p5_s37[1][:2])} / {_fmt(p5_s37[1][2:])} (two runs at 8), "
         f"with a capped cost's margin from its capping cell {_fmt(p5_s37[2])}; adaptive "
         f"and depth 3 in one process, each after a plain pass (s38, B=8 / 16): adaptive "
         f"{_fmt(p5_s38[0])}, depth 3 {_fmt(p5_s38[1])}; adaptive holding a drafted depth "
         f"(s39, B=8 / 16): served {_fmt(p5_s39[0])}, depth 3 {_fmt(p5_s39[1])}; closed batch "
         f"{_fmt(p5_s39[2])}, depth 3 {_fmt(p5_s39[3])}; again (s40, B=16, adaptive): closed "
         f"batch / served {_fmt(p5_s40)}; joins without a settle (s41, adaptive): served "
         f"B=1 / 4 / 8 / 16 {_fmt(p5_s41[:4])}, closed B=8 / 16 {_fmt(p5_s41[4:])}; its final "
         f"form in one process with the code before it (B=16): closed / served "
         f"{_fmt(p5_s41_final)}; adaptive up to the served cap of 4, in one process with plain "
         f"(s46): B=1 / 4 {_fmt(p5_s46[:2])}, again B=1 / 4 / 16 {_fmt(p5_s46[2:])}; this "
         f"tree, two engines of each kind in turns (s54, B=1 / 4 / 16): {_fmt(p5_s54[0])} and "
         f"{_fmt(p5_s54[1])}; every round from the launcher thread (s56, trained again, B=1 / "
         f"4 / 8 / 16): {_fmt(p5_s56)}; again (s57, B=8 / 16): {_fmt(p5_s57)}, and in one process "
         f"adaptive up to 3 {_fmt(p5_s57_policy[0])} against depth 3 held "
         f"{_fmt(p5_s57_policy[1])}; the policy as served since stop 59, in one process "
         f"(s60, B=1 / 4 / 8 / 16): {_fmt(p5_s60)}, against the policy before it "
         f"{_fmt(p5_s60_probing)} (B=4 / 8 / 16); stop 65's tree on an H100, trained again "
         f"(s66, B=1 / 4 / 8 / 16): {_fmt(p5_s66)}",
         _status(_served_p5(p5) + p5_closed[0] + p5_s37[0] + p5_s38[1] + sum(p5_s39, []) + p5_s40
                 + p5_s41 + p5_s41_final + p5_s46 + sum(p5_s54, []) + p5_s56 + p5_s57
                 + sum(p5_s57_policy, []) + p5_s60 + p5_s60_probing + p5_s66, 1.5)),
    ]  # fmt: skip
    out = [
        "## Issue 11's targets, where each stands",
        "",
        "The newest measurement of each (CPU: the 2-core VM, fp32, BLIS; GPU: one NVIDIA H200, "
        "or an H100 where a figure says so, bf16; GPU rows as each stop's engine ran: its "
        "launcher thread at 8 rows or more until stop 54, every round since stop 55, "
        "bench/results/s32/ and s55/README.md). Why the missed ones are missed: "
        "bench/results/s29/README.md, s30/ to s39/README.md and the stop notes.",
        "",
        "| # | target | measured | status |",
        "|---|---|---|---|",
    ]
    return out + [f"| {n} | {t} | {m} | {s} |" for n, t, m, s in rows] + [""]
