"""Stop strings become token-id stops in the worker service, before a request reaches the
engine thread: the engine would tokenize them in `add_request`, between rounds, stalling every
session's batch while it did (issue 13, defect 5). The result is what the engine would build:
`tokenizer.encode(s, add_special_tokens=False)` per string; a string that encodes to nothing
is dropped, as the engine ignores an empty stop.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from contract.types import SamplingParams


class StopTokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


def has_stop_strings(params: SamplingParams) -> bool:
    return any(isinstance(s, str) for s in params.stop)


def tokenize_stops(tokenizer: StopTokenizer, params: SamplingParams) -> SamplingParams:
    """`params` with every stop string replaced by its token ids; raises ValueError."""
    if not has_stop_strings(params):
        return params
    stops: list[tuple[int, ...]] = []
    for s in params.stop:
        ids = tuple(tokenizer.encode(s, add_special_tokens=False)) if isinstance(s, str) else s
        if ids:
            stops.append(ids)
    return dataclasses.replace(params, stop=tuple(stops))
