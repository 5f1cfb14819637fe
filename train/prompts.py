"""Held-out evaluation prompts: code cut from held-out stdlib files around function definitions."""

from __future__ import annotations

import json
import random
from pathlib import Path

from train.corpus import SourceFile

CONTEXT_BEFORE = 8  # lines kept above the `def` line
LINES_AFTER = 2  # lines kept after it (signature continuation / docstring start)


def cut_prompts(files: list[SourceFile], n: int, seed: int) -> list[tuple[str, str]]:
    """(custom_id, prompt) pairs: `n` function openings picked with a seeded shuffle."""
    sites = []
    for f in files:
        lines = f.text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def ") and i >= 2:
                sites.append((f, lines, i))
    rng = random.Random(seed)
    rng.shuffle(sites)
    out = []
    for f, lines, i in sites[:n]:
        prompt = "".join(lines[max(0, i - CONTEXT_BEFORE) : i + 1 + LINES_AFTER])
        out.append((f"{f.rel}:{i + 1}", prompt))
    return sorted(out)


def write_heldout_prompts(path: Path, files: list[SourceFile], seed: int, n: int = 64) -> int:
    """OpenAI Batch input lines for /v1/completions; returns the number written."""
    rows = [
        {
            "custom_id": cid,
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": prompt, "max_tokens": 64},
        }
        for cid, prompt in cut_prompts(files, n, seed)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)
