"""bench/report_targets.py: each target's status follows the numbers it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.report_targets as rt


def _write(root: Path, rel: str, data: dict) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(json.dumps(data))


def _gpu(plain: list[float], eff: list[float], off: float = 0.5) -> dict:
    """A `bench.gpu --ab-launch` file: BatchGenerator at 100 tokens/s, the launcher's side at
    the given ratios, the other side at `off` times them (the report must read the side the
    engines of stops 32-54 ran: off below 8 rows, on from 8)."""
    rows = {
        b: {
            "tokens_per_round": 5.0,
            "tokens_per_s_each_pass": {
                "bg": [100.0, 90.0, 110.0],
                "plain": [100 * p], "plain_off": [100 * p * off],
                "forced": [500 * e], "forced_off": [500 * e * off],
            },
        }
        for b, p, e in zip(("1", "8", "32"), plain, eff)
    }  # fmt: skip
    return {"models": {"6b": {"rows": rows}}}


def _p5(on: dict[str, float], off: dict[str, float]) -> dict:
    return {"batch": {f"{b} launch": {"summary": {"mtp_over_plain_on": on[b],
                                                  "mtp_over_plain_off": off[b]}} for b in on}}  # fmt: skip


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(rt, "RESULTS", tmp_path)
    return tmp_path


def test_statuses_follow_the_numbers(results: Path) -> None:
    # B=1 reads the off side: 2.4 * 0.5 = 1.2 and 1.9 * 0.5 = 0.95
    _write(results, rt.GPU_6B, _gpu([2.4, 0.9, 1.1], [1.9, 0.91, 0.74]))
    _write(results, "s32/p5_launch_ab_h200.json", _p5({"1": 0.1, "8": 1.7}, {"1": 1.6, "8": 0.2}))
    lines = rt.targets_section()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| P")}
    assert set(rows) == {"P1", "P2", "P3", "P4", "P5"}
    assert rows["P1"].endswith("| missed in 1 of 3 (below 1.0) |"), rows["P1"]
    assert "1.20 / 0.90 / 1.10" in rows["P1"], rows["P1"]
    assert "B ≤ 8: met; B = 32: missed in 1 of 1 (below 0.75)" in rows["P2"], rows["P2"]
    assert rows["P5"].endswith("| met |") and "1.60 / 1.70" in rows["P5"], rows["P5"]
    assert rows["P4"].endswith("| not measured |")  # no engine_cpu.json here


def test_a_target_every_result_clears_is_met(results: Path) -> None:
    _write(results, rt.GPU_6B, _gpu([2.0, 1.3, 1.1], [1.8, 0.95, 0.8]))
    lines = rt.targets_section()
    p1 = next(line for line in lines if line.startswith("| P1"))
    p2 = next(line for line in lines if line.startswith("| P2"))
    assert p1.endswith("| met |") and "B ≤ 8: met; B = 32: met" in p2


def test_p4_reads_the_turn_taking_pairs_where_they_exist(results: Path) -> None:
    medians = {"1": 1.0, "4": 0.95, "8": 1.02}
    batch = {b: {"slow_adaptive_over_plain_median": m} for b, m in medians.items()}
    _write(results, "s31/p4_pairs_cpu.json", {"batch": batch})
    p4 = next(line for line in rt.targets_section() if line.startswith("| P4"))
    assert "1.00 / 0.95 / 1.02" in p4 and p4.endswith("| missed in 1 of 3 (below 0.97) |"), p4


def test_a_gpu_file_without_the_launch_ab_reads_its_one_side(results: Path) -> None:
    """`bench.gpu` without `--ab-launch` times the engine as it runs, at every batch size."""
    gpu = _gpu([2.4, 0.9, 1.1], [1.9, 0.91, 0.74])
    for row in gpu["models"]["6b"]["rows"].values():
        for side in ("plain_off", "forced_off"):
            del row["tokens_per_s_each_pass"][side]
    _write(results, rt.GPU_6B, gpu)
    lines = rt.targets_section()
    p1 = next(line for line in lines if line.startswith("| P1"))
    p2 = next(line for line in lines if line.startswith("| P2"))
    assert "H200 6.6B 2.40 / 0.90 / 1.10" in p1, p1
    assert "H200 6.6B 1.90 / 0.91 / 0.74" in p2, p2
