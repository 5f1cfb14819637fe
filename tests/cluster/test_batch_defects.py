"""Batch-job defects of issue 13 (2, 3, 4 and 9's error keys), each reproduced: a line that
crashed the job, an id that could not be written, failed rows never retried, and error-file
keys that named the wrong line."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.batch_job import BatchJobConfig, run_batch
from cluster.openai_format import GenerationResult, ParsedBody
from tests.cluster.batch_runner import fake_backend


def line(cid: str, prompt: str = "hello") -> str:
    return json.dumps({"custom_id": cid, "body": {"prompt": prompt, "max_tokens": 3}}) + "\n"


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_deeply_nested_line_is_a_malformed_line(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    deep = "[" * 200_000 + "]" * 200_000
    inp.write_text(line("a") + deep + "\n" + line("b"))
    summary = run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    assert summary.num_succeeded == 2 and summary.num_malformed == 1
    (err,) = rows(tmp_path / "out.errors.jsonl")
    assert err["line"] == 2 and "nested" in err["error"]["message"]


def test_lone_surrogate_custom_id_is_refused_and_the_job_finishes(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    # JSON text may escape a lone surrogate; Python decodes it to a str UTF-8 cannot encode.
    bad = '{"custom_id": "a\\ud800", "body": {"prompt": "x"}}\n'
    inp.write_text(line("ok1") + bad + line("ok2"))
    for _ in range(2):  # the first run, then a re-run (resume) over the finished job
        summary = run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    assert sorted(r["custom_id"] for r in rows(out)) == ["ok1", "ok2"]
    (err,) = rows(tmp_path / "out.errors.jsonl")
    assert err["line"] == 2 and "custom_id" in err["error"]["message"]
    assert "surrogate" in err["error"]["message"]
    assert summary.num_malformed == 1


class Flaky:
    """Fails each custom_id in `fail` on its first call only (a retry timeout, a lost worker)."""

    def __init__(self, fail: set[str]) -> None:
        self.fail = set(fail)

    def __call__(self, parsed: ParsedBody, custom_id: str) -> GenerationResult:
        if custom_id in self.fail:
            self.fail.discard(custom_id)
            raise RuntimeError(f"UNAVAILABLE: gave up on {custom_id}")
        return fake_backend(parsed, custom_id)


def test_resume_retries_failed_rows(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = [f"r{i}" for i in range(8)]
    inp.write_text("".join(line(c) for c in ids))
    backend = Flaky({"r2", "r5"})
    first = run_batch(BatchJobConfig(inp, out, progress=False), backend)
    assert first.num_failed == 2 and first.num_succeeded == 6
    again = run_batch(BatchJobConfig(inp, out, progress=False), backend)
    assert again.num_resumed == 6 and again.num_succeeded == 2 and again.num_failed == 0
    got = rows(out)
    assert sorted(r["custom_id"] for r in got) == sorted(ids)  # every custom_id once
    assert all(r["response"]["status_code"] == 200 for r in got)
    assert rows(tmp_path / "out.errors.jsonl") == []  # no stale failure of a retried row


def test_keep_failed_keeps_failed_rows(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text(line("a") + line("b"))
    backend = Flaky({"b"})
    run_batch(BatchJobConfig(inp, out, progress=False), backend)
    again = run_batch(BatchJobConfig(inp, out, progress=False, retry_failed=False), backend)
    assert again.num_resumed == 2 and again.num_succeeded == 0
    by_id = {r["custom_id"]: r for r in rows(out)}
    assert by_id["b"]["response"]["status_code"] == 500


def test_error_keys_are_file_lines(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    text = line("a") + "not json\n" + "\n" + line("b") + line("c", "FAIL here")
    inp.write_text(text)
    run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    errors = {e["custom_id"]: e for e in rows(tmp_path / "out.errors.jsonl")}
    assert errors[None]["line"] == 2
    assert errors["c"]["line"] == 5  # the fifth line of the file (was "request:2")


def test_output_lines_survive_readers_that_split_on_unicode_breaks(tmp_path: Path) -> None:
    """Found by the batch fuzz: a custom_id holding U+0085 was written raw, and a JSON Lines
    reader using str.splitlines() saw a torn line."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = ["a\x85b", "c\u2028d", "e\u2029f"]
    inp.write_text("".join(line(c) for c in ids), encoding="utf-8")
    run_batch(BatchJobConfig(inp, out, progress=False), fake_backend)
    text = out.read_text(encoding="utf-8")
    assert sorted(json.loads(x)["custom_id"] for x in text.splitlines()) == sorted(ids)
