"""RESULTS.md section: the demo's batch job in one process (bench/adaptive_batch.py) and the
demo itself in two trees (bench/demo_ab.py), from their JSON in bench/results/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _ratios(data: dict[str, Any]) -> dict[str, list[float]]:
    plain = [r["seconds"] for r in data["runs"]["plain"]]
    return {k: [p / r["seconds"] for p, r in zip(plain, v)] for k, v in data["runs"].items()}


def demo_section() -> list[str]:
    out: list[str] = []
    batch = sorted(RESULTS.glob("adaptive_batch_cpu*.json"))
    if batch:
        out += ["## The demo's batch job in one process (CPU)", "",
                "`python -m bench.adaptive_batch`: 32 held-out prompts through one engine of 16 "
                "slots, serving defaults, each job timed end to end (prefill included); repeat 1 "
                "has a cold prefix cache, later repeats a warm one. Ratio = plain seconds ÷ seconds.",
                "`mtp_held_at_0`: the adaptive engine with its policy forced to depth 0 (what the "
                "attached head costs); `mtp_adaptive_no_explore`: exploration off.",
                "", "| file | configuration | ÷ plain, each repeat | median |",
                "|---|---|---|---|"]  # fmt: skip
        for path in batch:
            for name, ratios in _ratios(json.loads(path.read_text())).items():
                if name == "plain":
                    continue
                out.append(
                    f"| {path.stem} | {name} | {' / '.join(f'{x:.2f}' for x in ratios)} | "
                    f"{float(np.median(ratios)):.2f} |"
                )
        out.append("")
    out += _cold_batch()
    demos = sorted((RESULTS / "before_after").glob("demo_cpu_*_vs_*.json"))
    if demos:
        out += ["## `./run demo`, two trees alternating (CPU)", "",
                "`python -m bench.demo_ab`: each row one demo run; single stream and batch job "
                "are the demo's own lines (MTP ÷ no drafter, and the tokens/s of each).", "",
                "| file | tree | single stream | batch job | batch MTP / plain tokens/s |",
                "|---|---|---|---|---|"]  # fmt: skip
        for path in demos:
            for run in json.loads(path.read_text())["runs"]:
                out.append(
                    f"| {path.stem} | {run['tree']} | {run['single_stream']:.2f}x | "
                    f"{run['batch_job']:.2f}x | {run['batch_mtp_tok_s']:.0f} / "
                    f"{run['batch_plain_tok_s']:.0f} |"
                )
        out.append("")
    return out


def _cold_batch() -> list[str]:
    """bench/cold_batch.py: the demo's per-worker job on cold engines (CPU: two processes at
    once, as the demo's workers; GPU: one)."""
    paths = sorted(RESULTS.glob("cold_batch_*.json"))
    if not paths:
        return []
    out = ["## A fresh engine's first batch job (bench/cold_batch.py)", "",
           "`python -m bench.cold_batch`: each process loads a fresh engine (serving defaults; "
           "load and warm-up untimed) and runs its share of the 64 held-out prompts as one job "
           "(CPU: two processes of 32 prompts at B=16 at once on the 2 cores, as the demo's two "
           "workers; GPU: `--processes 1 --batch-size 32`). Variants alternate; each cell is a "
           "variant's tokens/s over the plain run's beside it, per pair (mean).", "",
           "| file | device | variant ÷ plain |", "|---|---|---|"]  # fmt: skip
    for path in paths:
        d = json.loads(path.read_text())
        cells = "; ".join(
            f"{name} {' / '.join(f'{x:.2f}' for x in r)} ({sum(r) / len(r):.2f})"
            for name, r in d["ratio_to_plain"].items()
        )
        note = f" ({d['note']})" if d.get("note") else ""
        out.append(f"| {path.stem}{note} | {d.get('device', 'Device(cpu, 0)')} | {cells} |")
    return out + [""]


def stream_bound_section() -> list[str]:
    """The single-stream ceiling (bench/stream_bound.py) beside the engine's speedup."""
    path = RESULTS / "stream_bound_cpu.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    out = ["## Single-stream ceiling of the default model's MTP head (CPU)", "",
           "`python -m bench.stream_bound`: one request at a time, "
           f"{d['prompts']} held-out prompts, {d['max_tokens']} new tokens. "
           f"A synced 1-token step of mlx-lm's own forward takes {d['step_ms']:.2f} ms, a head "
           f"step {d['head_step_ms']:.2f} ms; the engine's plain step {d['plain_engine_step_ms']:.2f}"
           f" ms; prefill is {d['prefill_share_plain']:.0%} of plain decoding's time. Ceiling = "
           "tokens per round × step ÷ (verify + depth × head step): the decode speedup of an "
           "engine with no overhead at all.", "",
           "| depth | verify ÷ step | tokens/round | ceiling | engine, decode | engine, end to end |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for r in d["depths"]:
        out.append(
            f"| {r['depth']} | {r['verify_over_step']:.2f} | {r['tokens_per_round']:.2f} | "
            f"{r['ceiling']:.2f}x | {r['engine_decode_speedup']:.2f}x | "
            f"{r['engine_end_to_end_speedup']:.2f}x |"
        )
    return out + [""]
