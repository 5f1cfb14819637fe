"""RESULTS.md's first section: issue 11's speed targets, each read from the newest result that
measures it (bench/results/s29/, s30/ and s31/README.md and their siblings say how each was
run); a target's status is computed from those numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
BG, PLAIN = "mlx_lm_batch_generator", "specfleet_plain"


def _load(rel: str) -> Any:
    path = RESULTS / rel
    return json.loads(path.read_text()) if path.exists() else None


def _engine(data: dict | None, Bs: tuple[str, ...], name: str, base: str) -> list[float]:
    rows = (data or {}).get("batch", {}).get("T=0.0", {})
    return [rows[b][name]["tokens_per_s"] / rows[b][base]["tokens_per_s"] for b in Bs if b in rows]


def _gpu(data: dict | None, key: str) -> list[float]:
    if not data:
        return []
    rows = next(iter(data["models"].values()))["rows"]
    return [rows[b][key] for b in sorted(rows, key=int)]


def _p5(data: dict | None) -> list[float]:
    batch = (data or {}).get("batch", {})
    return [batch[b]["mtp_over_plain_median"] for b in sorted(batch, key=int) if b.isdigit()]


def _fmt(xs: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in xs) or "n/a"


def _status(xs: list[float], floor: float) -> str:
    if not xs:
        return "not measured"
    missed = sum(x < floor for x in xs)
    return "met" if not missed else f"missed in {missed} of {len(xs)} (below {floor})"


def targets_section() -> list[str]:
    cpu, real = _load("engine_cpu.json"), _load("s28/engine_real_cpu.json")
    ab = _load("s28/cpu_ops_ab_cpu.json")
    g6, g1 = _load("s29/gpu_6b_final.json"), _load("s29/gpu_1b_final.json")
    demo = _load("s31/demo_ab_cpu_d95c6bf_vs_3466a7d.json")
    p5, p5a = _load("s29/p5_final.json"), _load("s31/pooled_p5_h200_D_final.json")
    cpu_p1 = (
        [ab["summary"][f"B={b}"]["plain_on_over_batch_generator"] for b in (1, 8)] if ab else []
    )
    real_p1 = _engine(real, ("1", "8"), PLAIN, BG)
    gpu_p1 = _gpu(g6, "plain_over_batch_generator") + _gpu(g1, "plain_over_batch_generator")
    eff6, eff1 = _gpu(g6, "efficiency"), _gpu(g1, "efficiency")  # B = 1, 8, 32
    runs = [r for r in (demo or {}).get("runs", []) if r["tree"] == "after"]
    single, batch = [r["single_stream"] for r in runs], [r["batch_job"] for r in runs]
    in_proc = _engine(cpu, ("1",), "specfleet_mtp", BG) + _engine(
        cpu, ("1",), "specfleet_mtp_adaptive", BG
    )
    slow = _engine(cpu, ("1", "4", "8"), "specfleet_slow_draft_adaptive", PLAIN)
    p4 = _load("s31/p4_pairs_cpu.json")  # bench/p4_pairs.py: turn-taking pairs, medians
    slow_pairs = [
        p4["batch"][b]["slow_adaptive_over_plain_median"]
        for b in ("1", "4", "8")
        if p4 and b in p4["batch"]
    ]
    p2 = [e for effs in (eff6, eff1) for e in effs[:2]]  # B <= 8
    p2_32 = [effs[2] for effs in (eff6, eff1) if len(effs) > 2]
    rows = [
        ("P1", "plain ÷ BatchGenerator ≥ 1.00",
         f"CPU default model {_fmt(cpu_p1)} (B=1 / 8, medians of 5 passes); real SmolLM2-135M "
         f"{_fmt(real_p1)} (B=1 / 8); H200 6.6B {_fmt(_gpu(g6, 'plain_over_batch_generator'))}, "
         f"0.87B {_fmt(_gpu(g1, 'plain_over_batch_generator'))} (B=1 / 8 / 32)",
         _status(cpu_p1 + real_p1 + gpu_p1, 1.0)),
        ("P2", "efficiency ≥ 0.90 at B ≤ 8, ≥ 0.75 at B = 32",
         f"H200 6.6B {_fmt(eff6)}, 0.87B {_fmt(eff1)} (B=1 / 8 / 32)",
         f"B ≤ 8: {_status(p2, 0.90)}; B = 32: {_status(p2_32, 0.75)}"),
        ("P3", "demo: single stream ≥ 1.8, batch job ≥ 1.2; in process MTP ÷ BatchGenerator "
         "at B=1 ≥ 1.8",
         f"demo single stream {_fmt(single)}, batch job {_fmt(batch)}; in process (single "
         f"pass) depth 3 / adaptive {_fmt(in_proc)}",
         f"single: {_status(single + in_proc, 1.8)}; batch: {_status(batch, 1.2)}"),
        ("P4", "a drafter that does not pay, adaptive ÷ plain ≥ 0.97",
         f"4-bit draft model on the CPU, B=1 / 4 / 8: medians of turn-taking pairs "
         f"{_fmt(slow_pairs)} (bench/p4_pairs.py); one pass each (bench/engine.py): "
         f"{_fmt(slow)}", _status(slow_pairs or slow, 0.97)),
        ("P5", "hybrid MTP ÷ plain ≥ 1.5 at B = 1-16",
         f"H200 trained hybrid, depth 3: {_fmt(_p5(p5))}; adaptive depth as a worker serves: "
         f"{_fmt(_p5(p5a))} (B=1 / 4 / 8 / 16)", _status(_p5(p5), 1.5)),
    ]  # fmt: skip
    out = [
        "## Issue 11's targets, where each stands",
        "",
        "The newest measurement of each (CPU: the 2-core VM, fp32, BLIS; GPU: one NVIDIA H200, "
        "bf16). Why the missed ones are missed: bench/results/s29/README.md, "
        "bench/results/s30/README.md, bench/results/s31/README.md and the stop notes.",
        "",
        "| # | target | measured | status |",
        "|---|---|---|---|",
    ]
    return out + [f"| {n} | {t} | {m} | {s} |" for n, t, m, s in rows] + [""]
