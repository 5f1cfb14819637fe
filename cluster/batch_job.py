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
Failed requests are served again on a re-run (their old entries are dropped first, so OUTPUT
still holds each custom_id once) unless `retry_failed=False` keeps them.

Error-file entries carry the input file's line number (`line`, counted from 1).
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
    retry_failed: bool = True  # a re-run serves again the requests that failed before

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


def recover_partial(
    path: Path, key: str, drop: Callable[[dict[str, Any]], bool] | None = None
) -> set[Any]:
    """Keys of the complete lines in a partial file; cuts a torn or unparsable tail in place,
    and removes the entries `drop` selects (rewritten atomically)."""
    if not path.exists():
        return set()
    done: set[Any] = set()
    kept: list[bytes] = []
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
            value = entry[key]
        except (ValueError, KeyError, TypeError, RecursionError):
            break  # a damaged line can only be the last one written; drop it and the rest
        if drop is None or not drop(entry):
            done.add(value)
            kept.append(data[pos : nl + 1])
        pos = good_end = nl + 1
    if len(kept) < len(done) or sum(map(len, kept)) < good_end:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(kept))
        os.replace(tmp, path)
    elif good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return done


def _failed(entry: dict[str, Any]) -> bool:
    response = entry.get("response")
    return not isinstance(response, dict) or response.get("status_code") != 200


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(f, start=1)


def _read_requests(
    path: Path,
) -> tuple[list[tuple[str, str | None, Any]], list[dict[str, Any]], dict[str, int]]:
    """Valid (custom_id, url, body) triples, error entries for the lines that are not, and the
    line number of each custom_id."""
    requests: list[tuple[str, str | None, Any]] = []
    line_of: dict[str, int] = {}
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
        except RecursionError:
            bad("JSON nested too deeply to read; each line must be one flat request object")
            continue
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or not cid:
            bad("missing or non-string 'custom_id'; every line needs a unique string custom_id")
            continue
        if not _is_unicode(cid):
            bad(f"custom_id={cid!r} holds a lone surrogate (not Unicode text): fix the id")
            continue
        if cid in seen:
            bad(f"duplicate custom_id {cid!r}: the first line with it is served", cid)
            continue
        seen.add(cid)
        line_of[cid] = n
        requests.append((cid, obj.get("url"), obj.get("body")))
    return requests, errors, line_of


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _open_append(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8")


# Characters that str.splitlines() and other JSON Lines readers take for line breaks; JSON
# leaves them raw inside strings, and they can occur only inside strings, so escaping is exact.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _write(f: IO[str], entry: dict[str, Any]) -> None:
    text = json.dumps(entry, ensure_ascii=False).translate(_LINE_BREAKS)
    if not _is_unicode(text):  # a lone surrogate in a message: escape it rather than crash
        text = json.dumps(entry, ensure_ascii=True)
    f.write(text + "\n")
    f.flush()  # a kill loses at most the line being written; recover_partial cuts it


def _partial(final: Path) -> Path:
    partial = final.with_name(final.name + ".partial")
    if final.exists() and not partial.exists():
        os.replace(final, partial)  # re-running a finished job resumes (and finds nothing to do)
    return partial


def run_batch(config: BatchJobConfig, backend: Backend | ChunkedBackend) -> BatchSummary:
    out_final, err_final = Path(config.output_path), config.errors
    out_partial, err_partial = _partial(out_final), _partial(err_final)
    retry = _failed if config.retry_failed else None
    done = recover_partial(out_partial, "custom_id", drop=retry)
    err_done = recover_partial(
        err_partial,
        "line",
        # a failure entry of a request served again this run goes; it is rewritten if it fails
        drop=lambda e: e.get("custom_id") is not None and e.get("custom_id") not in done,
    )
    requests, malformed, line_of = _read_requests(Path(config.input_path))
    summary = BatchSummary(
        num_requests=len(requests),
        num_malformed=len(malformed),
        output_path=str(out_final),
        error_path=str(err_final),
    )
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
            key = line_of[cid]
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
