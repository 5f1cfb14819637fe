"""Requests become batch rows here: validation at the API edge and each row's KV reservation.

Every error names the value and the fix and touches nothing else (the engine keeps serving);
a request that passes is one `Row` the engine can admit.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.rows import Row
from workers.types import SamplingParams


@dataclass(frozen=True)
class RowFactory:
    tokenizer: object | None
    vocab_size: int
    max_context: int
    kv_budget: int  # tokens of this engine's cache one row may reserve at most
    eos_ids: frozenset[int]

    def make(self, request_id: str, prompt: Sequence[int] | str, params: SamplingParams) -> Row:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id={request_id!r} is invalid: pass a non-empty string")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params={params!r} is not a SamplingParams")
        tokens = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not tokens:
            raise ValueError(f"prompt={prompt!r} is empty: pass at least one token")
        bad = [t for t in tokens if isinstance(t, bool) or not isinstance(t, (int, np.integer))]
        if bad:
            raise ValueError(f"prompt holds non-integer token ids {bad[:5]}: pass ints")
        out_of_vocab = [int(t) for t in tokens if not 0 <= t < self.vocab_size]
        if out_of_vocab:
            raise ValueError(
                f"prompt token ids {out_of_vocab[:5]} are outside the vocabulary "
                f"[0, {self.vocab_size}): re-tokenize with this model's tokenizer"
            )
        if len(tokens) >= self.max_context:
            raise ValueError(
                f"prompt length {len(tokens)} leaves no room in the context of {self.max_context} "
                "tokens: shorten the prompt"
            )
        if self.reserve(len(tokens), params) > self.kv_budget:
            raise ValueError(
                f"prompt length {len(tokens)} + max_tokens {params.max_tokens} exceeds the KV "
                f"budget of {self.kv_budget} tokens: lower max_tokens or shorten the prompt"
            )
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_ids))
        seqs = [tuple(self.encode(s)) if isinstance(s, str) else tuple(s) for s in params.stop]
        stop_ids |= {s[0] for s in seqs if len(s) == 1}
        return Row(
            request_id=request_id,
            params=params,
            prompt_len=len(tokens),
            history=[int(t) for t in tokens],
            stop_ids=frozenset(stop_ids),
            stop_seqs=tuple(s for s in seqs if len(s) > 1),
            max_context=self.max_context,
            arrival_s=time.monotonic(),
            # Unseeded requests still get a fixed per-request seed: keys need one (keys.py).
            seed=params.seed if params.seed is not None else secrets.randbits(63),
        )

    def reserve(self, prompt_len: int, params: SamplingParams) -> int:
        return min(prompt_len + params.max_tokens, self.max_context)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("text prompt given but the engine has no tokenizer: pass token ids")
        return list(self.tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]

    def decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(tokens))  # type: ignore[attr-defined]
