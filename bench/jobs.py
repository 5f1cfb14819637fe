"""Helpers the end-to-end job benches share: one job's tokens/s, and their JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import mlx.core as mx


def job_rate(engine: Any, prompts: list[str], params: Any) -> float:
    """Generated tokens per second of one job: every prompt through `engine.generate`."""
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    return sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0)


def write_rows(out: str, rows: dict[str, dict[str, list[float]]]) -> None:
    """{batch size: {variant: [tokens/s per repeat]}} with the device, as JSON at `out`."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"device": str(mx.default_device()), "rows": rows}, indent=1))
