"""Offline batch evaluation in the OpenAI Batch JSONL format, resumable after a kill.

Input lines: `{"custom_id": str, "method": "POST", "url": "/v1/completions" |
"/v1/chat/completions", "body": {...}}`. Output lines: `{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}`.

Files: OUTPUT holds every valid custom_id exactly once (a failed request has status_code != 200
and an `error`); the error file (default OUTPUT with `.errors.jsonl`) holds every failure: lines
that are not valid requests (with their line number) and failed requests.

Resume: results are appended to `OUTPUT.partial` and flushed one line at a time. A re-run
rebuilds the done-set from the custom_ids already there, cuts a torn last line, serves only the
rest, and renames the partial files over the final names at the end (atomic `os.replace`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from cluster.batch_inflight import ChunkedBackend, chunk_size, submit_chunk
from cluster.openai_format import (
    BodyError,
    GenerationResult,
    ParsedBody,
    parse_body,
    response_body,
)
from cluster.progress import Progress

# One request: parsed body and custom_id in, result out; raise BodyError for a 400, anything
# else becomes a 500 entry for that request only.
Backend = Callable[[ParsedBody, str], GenerationResult]
MAX_LINE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class BatchJobConfig:
    input_path: Path
    output_path: Path
    error_path: Path | None = None
    concurrency: int = 32
    progress: bool = True
    model: str = "specfleet"

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"BatchJobConfig.concurrency={self.concurrency!r}: use >= 1")
        if Path(self.input_path).resolve() == Path(self.output_path).resolve():
            raise ValueError(f"output {self.output_path} would overwrite the input: pick another")

    @property
    def errors(self) -> Path:
        if self.error_path is not None:
            return Path(self.error_path)
        out = Path(self.output_path)
        return out.with_name(out.name.removesuffix(".jsonl") + ".errors.jsonl")


@dataclass
class BatchSummary:
    num_requests: int = 0  # valid requests in the input
    num_resumed: int = 0  # already done before this run
    num_succeeded: int = 0  # this run
    num_failed: int = 0  # this run (requests that got an error response)
    num_malformed: int = 0  # input lines that are not valid requests
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    elapsed_s: float = 0.0
    # Speculation rounds over the fleet during the job (from worker metrics, when known):
    # mean acceptance length = 1 + accepted / drafts (vLLM's definition).
    fleet_num_drafts: int = 0
    fleet_num_accepted_tokens: int = 0
    output_path: str = ""
    error_path: str = ""
    failures: list[str] = field(default_factory=list)  # first few messages

    @property
    def tokens_per_s(self) -> float:
        return self.num_generated_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        if self.num_draft_tokens == 0:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def mean_acceptance_length(self) -> float | None:
        if self.fleet_num_drafts <= 0:
            return None
        return 1.0 + self.fleet_num_accepted_tokens / self.fleet_num_drafts

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens_per_s"] = self.tokens_per_s
        d["acceptance_rate"] = self.acceptance_rate
        d["mean_acceptance_length"] = self.mean_acceptance_length
        return d

    def render(self) -> str:
        acc = self.acceptance_rate
        lines = [
            f"requests:    {self.num_requests} ({self.num_resumed} resumed, "
            f"{self.num_succeeded} ok, {self.num_failed} failed, "
            f"{self.num_malformed} malformed lines)",
            f"tokens:      {self.num_prompt_tokens} prompt, {self.num_generated_tokens} generated",
            f"throughput:  {self.tokens_per_s:.1f} generated tokens/s over {self.elapsed_s:.2f} s",
            "acceptance:  "
            + (
                "n/a (no drafts)" if acc is None else f"{acc:.3f} of {self.num_draft_tokens} drafts"
            ),
        ]
        if self.mean_acceptance_length is not None:
            lines.append(
                f"acc. length: {self.mean_acceptance_length:.2f} tokens per round "
                f"({self.fleet_num_drafts} drafting rows, worker metrics)"
            )
        lines += [f"output:      {self.output_path}", f"errors:      {self.error_path}"]
        lines += [f"  failure: {m}" for m in self.failures]
        return "\n".join(lines)


def recover_partial(path: Path, key: str) -> set[Any]:
    """Keys of the complete lines in a partial file; cuts a torn or unparsable tail in place."""
    if not path.exists():
        return set()
    done: set[Any] = set()
    good_end = 0
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break  # torn last line: no newline made it to disk
        try:
            entry = json.loads(data[pos:nl])
            done.add(entry[key])
        except (ValueError, KeyError, TypeError):
            break  # a damaged line can only be the last one written; drop it and the rest
        pos = good_end = nl + 1
    if good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return done


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(f, start=1)


def _read_requests(
    path: Path,
) -> tuple[list[tuple[str, str | None, Any]], list[dict[str, Any]]]:
    """Valid (custom_id, url, body) triples and error entries for the lines that are not."""
    requests: list[tuple[str, str | None, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, raw in _lines(path):
        if not raw.strip():
            continue

        def bad(msg: str, cid: str | None = None, n: int = n) -> None:
            errors.append({"line": n, "custom_id": cid, "error": {"code": 400, "message": msg}})

        if len(raw) > MAX_LINE_BYTES:
            bad(f"line is {len(raw)} bytes, over the {MAX_LINE_BYTES}-byte limit")
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            bad(f"not valid JSON ({e}); each line must be one JSON object")
            continue
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or not cid:
            bad("missing or non-string 'custom_id'; every line needs a unique string custom_id")
            continue
        if cid in seen:
            bad(f"duplicate custom_id {cid!r}: the first line with it is served", cid)
            continue
        seen.add(cid)
        requests.append((cid, obj.get("url"), obj.get("body")))
    return requests, errors


def _open_append(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


def _write(f: IO[str], entry: dict[str, Any]) -> None:
    f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    f.flush()  # a kill loses at most the line being written; recover_partial cuts it


def _partial(final: Path) -> Path:
    partial = final.with_name(final.name + ".partial")
    if final.exists() and not partial.exists():
        os.replace(final, partial)  # re-running a finished job resumes (and finds nothing to do)
    return partial


def run_batch(config: BatchJobConfig, backend: Backend | ChunkedBackend) -> BatchSummary:
    out_final, err_final = Path(config.output_path), config.errors
    out_partial, err_partial = _partial(out_final), _partial(err_final)
    done = recover_partial(out_partial, "custom_id")
    err_done = recover_partial(err_partial, "line")
    requests, malformed = _read_requests(Path(config.input_path))
    summary = BatchSummary(
        num_requests=len(requests),
        num_malformed=len(malformed),
        output_path=str(out_final),
        error_path=str(err_final),
    )
    line_of = {cid: n for n, (cid, _, _) in enumerate(requests)}  # stable error-file keys
    todo = [r for r in requests if r[0] not in done]
    summary.num_resumed = len(requests) - len(todo)
    start = time.monotonic()
    status = backend.status if isinstance(backend, ChunkedBackend) else None
    progress = Progress(len(requests), summary.num_resumed, enabled=config.progress, status=status)
    with _open_append(out_partial) as out, _open_append(err_partial) as err:
        for e in malformed:
            if e["line"] not in err_done:
                _write(err, e)

        def record(cid: str, url: str | None, fut: Future[tuple[ParsedBody, GenerationResult]]):
            entry: dict[str, Any] = {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": cid}
            try:
                parsed, result = fut.result()
            except BodyError as e:
                status, message = 400, str(e)
            except Exception as e:  # one request's failure never stops the job
                status, message = 500, f"{type(e).__name__}: {e}"
            else:
                body = response_body(result, is_chat=parsed.is_chat, model=config.model)
                entry["response"] = {"status_code": 200, "request_id": body["id"], "body": body}
                entry["error"] = None
                _write(out, entry)
                summary.num_succeeded += 1
                summary.num_prompt_tokens += result.num_prompt_tokens
                summary.num_generated_tokens += result.num_generated_tokens
                summary.num_draft_tokens += result.num_draft_tokens
                summary.num_accepted_tokens += result.num_accepted_tokens
                progress.update(tokens=summary.num_generated_tokens)
                return
            error = {"code": status, "message": message}
            entry["response"] = {"status_code": status, "request_id": None, "body": None}
            entry["error"] = error
            _write(out, entry)
            key = f"request:{line_of[cid]}"
            if key not in err_done:
                _write(err, {"line": key, "custom_id": cid, "error": error})
            summary.num_failed += 1
            if len(summary.failures) < 5:
                summary.failures.append(f"{cid}: {message}")
            progress.update(tokens=summary.num_generated_tokens, failed=True)

        def call(cid: str, url: str | None, body: Any) -> tuple[ParsedBody, GenerationResult]:
            assert not isinstance(backend, ChunkedBackend)
            parsed = parse_body(body, url)
            return parsed, backend(parsed, cid)

        pending: dict[Future[tuple[ParsedBody, GenerationResult]], tuple[str, str | None]] = {}

        def drain(limit: int) -> None:
            while len(pending) > limit:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    record(*pending.pop(f), f)

        if isinstance(backend, ChunkedBackend):
            # Chunks of a quarter of the in-flight target, the target re-read as the fleet
            # changes: the fleet stays full while a chunk's slowest request finishes.
            with ThreadPoolExecutor(max_workers=64) as chunk_pool:
                chunk: list[tuple[str, str | None, Any]] = []
                for line in todo:
                    limit = backend.in_flight()
                    chunk.append(line)
                    if len(chunk) >= chunk_size(limit, backend.max_chunk):
                        drain(max(limit - len(chunk), 0))
                        pending.update(submit_chunk(chunk_pool, backend, chunk))
                        chunk = []
                if chunk:
                    drain(max(backend.in_flight() - len(chunk), 0))
                    pending.update(submit_chunk(chunk_pool, backend, chunk))
                drain(0)
            todo = []
        with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
            for cid, url, body in todo:
                while len(pending) >= 2 * config.concurrency:  # bounded memory on huge inputs
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        record(*pending.pop(f), f)
                pending[pool.submit(call, cid, url, body)] = (cid, url)
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    record(*pending.pop(f), f)
    progress.close()
    summary.elapsed_s = time.monotonic() - start
    os.replace(out_partial, out_final)
    os.replace(err_partial, err_final)
    return summary


def main_with_backend(
    config: BatchJobConfig,
    backend: Backend | ChunkedBackend,
    summary_json: Path | None,
    finish: Callable[[BatchSummary], None] | None = None,
) -> int:
    summary = run_batch(config, backend)
    if finish is not None:
        finish(summary)  # e.g. add fleet-wide counts scraped from worker metrics
    print(summary.render(), file=sys.stderr)
    if summary_json is not None:
        summary_json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0
