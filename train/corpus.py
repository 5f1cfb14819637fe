"""The default model's corpus: this interpreter's standard-library Python sources.

Deterministic file list (sorted relative POSIX paths) and split: a file is held out when
sha256(relative path) mod 100 < HELDOUT_PERCENT. Test suites, codec tables and generated
config data are excluded (they are not code people write).
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HELDOUT_PERCENT = 5
EOS = "<|endoftext|>"
EXCLUDED_DIRS = frozenset(
    {"site-packages", "test", "tests", "idle_test", "encodings", "pydoc_data", "__pycache__"}
)
TEST_DIRS = frozenset({"test", "tests", "idle_test"})


@dataclass(frozen=True)
class SourceFile:
    rel: str  # relative POSIX path under the stdlib root
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    return sys.version.split()[0]


def is_heldout(rel: str) -> bool:
    digest = hashlib.sha256(rel.encode()).hexdigest()
    return int(digest[:8], 16) % 100 < HELDOUT_PERCENT


def list_sources(root: Path | None = None, include_tests: bool = False) -> list[SourceFile]:
    """All usable *.py files under the stdlib, sorted by relative path.

    include_tests adds the test suites (19 MB of code, 2.5x the rest): more training text for
    bigger models. The held-out files of the default split do not change with it (the split
    hashes each path alone), so evaluation and prompts stay comparable.
    """
    root = root or stdlib_root()
    excluded = EXCLUDED_DIRS - TEST_DIRS if include_tests else EXCLUDED_DIRS
    out = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if excluded.intersection(parts[:-1]) or parts[0].startswith("config-"):
            continue
        if parts[-1].startswith("_sysconfigdata") or (
            parts[-1].startswith("test_") and not include_tests
        ):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            out.append(SourceFile(rel, text))
    return out


def is_test(rel: str) -> bool:
    parts = rel.split("/")
    return bool(TEST_DIRS.intersection(parts[:-1])) or parts[-1].startswith("test_")


def without_tests(files: list[SourceFile]) -> list[SourceFile]:
    return [f for f in files if not is_test(f.rel)]


def split(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    train = [f for f in files if not is_heldout(f.rel)]
    heldout = [f for f in files if is_heldout(f.rel)]
    return train, heldout


def encode_stream(tokenizer: object, files: list[SourceFile], eos_id: int) -> np.ndarray:
    """Concatenate files as token ids, each followed by EOS: int32 [N]."""
    encs = tokenizer.encode_batch([f.text for f in files])  # type: ignore[attr-defined]
    chunks = []
    for enc in encs:
        chunks.append(np.asarray(enc.ids, dtype=np.int32))
        chunks.append(np.asarray([eos_id], dtype=np.int32))
    return np.concatenate(chunks) if chunks else np.zeros((0,), dtype=np.int32)


def batches(stream: np.ndarray, batch_size: int, seq_len: int, seed: int) -> Iterator[np.ndarray]:
    """Endless random windows [batch_size, seq_len + 1] from `stream`, seeded."""
    rng = np.random.default_rng(seed)
    hi = len(stream) - seq_len - 1
    if hi <= 0:
        raise ValueError(f"token stream of {len(stream)} is shorter than seq_len+1={seq_len + 1}")
    while True:
        starts = rng.integers(0, hi, size=batch_size)
        yield np.stack([stream[s : s + seq_len + 1] for s in starts])


def eval_windows(stream: np.ndarray, seq_len: int, max_windows: int) -> np.ndarray:
    """Windows [N, seq_len + 1] evenly spaced over `stream` (deterministic, non-overlapping)."""
    fit = (len(stream) - 1) // seq_len
    n = min(max_windows, fit)
    starts = [(i * fit // n) * seq_len for i in range(n)]
    return np.stack([stream[s : s + seq_len + 1] for s in starts])
