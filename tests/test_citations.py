"""Citations in code resolve inside the repository: every "seed NNN" a comment or test cites has
a section in docs/field-failures.md, and every test that document names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "field-failures.md"
SCANNED = ("workers", "cluster", "protos", "contract", "tests", "bench")
SEED = re.compile(r"[Ss]eed[ _]?(0\d\d)(?!\d)")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def sources() -> list[Path]:
    return [p for d in SCANNED for p in sorted((ROOT / d).rglob("*.py")) if "_pb2" not in p.name]


def test_every_cited_seed_has_a_section() -> None:
    sections = set(re.findall(r"^## seed (\d{3})$", DOC.read_text(), flags=re.M))
    assert sections, "docs/field-failures.md has no '## seed NNN' sections"
    cited: dict[str, list[str]] = {}
    for path in sources():
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for seed in SEED.findall(line):
                cited.setdefault(seed, []).append(f"{path.relative_to(ROOT)}:{n}")
    assert cited, "no citations found: is the pattern still right?"
    missing = {s: where for s, where in cited.items() if s not in sections}
    assert not missing, f"cited but not in {DOC.relative_to(ROOT)}: {missing}"


def test_every_test_named_in_the_document_exists() -> None:
    refs = TEST_REF.findall(DOC.read_text())
    assert len(refs) >= 5
    for file, name in refs:
        path = ROOT / file
        assert path.is_file(), f"{DOC.name} names {file}, which does not exist"
        assert re.search(rf"^def {name}\(", path.read_text(), flags=re.M), (
            f"{DOC.name} names {file}::{name}, which is not defined there"
        )
