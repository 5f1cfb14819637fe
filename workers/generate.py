"""Engine.generate: submit prompts, step the engine until every one finished, collect them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from workers.types import Completion, SamplingParams

if TYPE_CHECKING:
    from workers.engine import Engine


def generate(
    engine: Engine,
    prompts: Sequence[Sequence[int] | str],
    params: SamplingParams | Sequence[SamplingParams] | None = None,
) -> list[Completion]:
    plist: list[SamplingParams | None] = (
        list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)  # type: ignore[list-item]
    )
    if len(plist) != len(prompts):
        raise ValueError(f"got {len(plist)} SamplingParams for {len(prompts)} prompts")
    ids = []
    for prompt, p in zip(prompts, plist):
        engine._next_id += 1
        ids.append(f"generate-{engine._next_id}")
        engine.add_request(ids[-1], prompt, p)
    done: dict[str, Completion] = {}
    partial: dict[str, list[int]] = {i: [] for i in ids}
    logprobs: dict[str, list[float]] = {i: [] for i in ids}
    while len(done) < len(ids):
        for ev in engine.step():
            if ev.request_id not in partial:
                continue
            partial[ev.request_id] += ev.new_tokens
            logprobs[ev.request_id] += ev.new_logprobs or []
            if ev.finished:
                assert ev.finish_reason is not None
                done[ev.request_id] = Completion(
                    request_id=ev.request_id,
                    tokens=partial[ev.request_id],
                    text=engine.row_factory.decode(partial[ev.request_id]),
                    finish_reason=ev.finish_reason,
                    num_draft_tokens=ev.num_draft_tokens,
                    num_accepted_tokens=ev.num_accepted_tokens,
                    logprobs=logprobs[ev.request_id] if ev.new_logprobs is not None else None,
                    error=ev.error,
                    num_cached_tokens=ev.num_cached_tokens,
                )
    # The last step may return with its launch (a round computing finished rows, discarded
    # later) still encoding on the launcher thread: the caller's next MLX work waits for none.
    engine.settle()
    return [done[i] for i in ids]
