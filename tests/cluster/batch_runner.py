"""Runs the offline batch job with a deterministic fake backend (the test is about resume, not
generation); used as a subprocess that the test kills halfway."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cluster.batch_job import BatchJobConfig, main_with_backend
from cluster.openai_format import BodyError, GenerationResult, ParsedBody

DELAY_S = 0.0


def fake_backend(parsed: ParsedBody, custom_id: str) -> GenerationResult:
    time.sleep(DELAY_S)
    text = parsed.prompt if isinstance(parsed.prompt, str) else parsed.messages[-1]["content"]  # type: ignore[index]
    if "FAIL" in text:
        raise RuntimeError(f"backend failed on {custom_id}")
    if "REJECT" in text:
        raise BodyError("body.prompt contains REJECT")
    out = text[::-1][: parsed.params.max_tokens]
    return GenerationResult(
        text=out,
        finish_reason="length",
        num_prompt_tokens=len(text),
        num_generated_tokens=len(out),
        tokens=[ord(c) % 256 for c in out],
        num_draft_tokens=4 * len(out),
        num_accepted_tokens=3 * len(out),
        request_id=f"req-{custom_id}",
    )


if __name__ == "__main__":
    DELAY_S = float(sys.argv[3])
    cfg = BatchJobConfig(Path(sys.argv[1]), Path(sys.argv[2]), concurrency=4, progress=True)
    raise SystemExit(main_with_backend(cfg, fake_backend, None))
