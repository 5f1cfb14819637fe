"""Verify: turn the target's window logits into each row's accepted drafts and emitted tokens."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from workers.accept import emitted_tokens, greedy_accept
from workers.drafters.base import Proposal


@dataclass
class Verdict:
    num_accepted: np.ndarray  # [B] drafts accepted per row
    tokens: np.ndarray  # [B, K+1]; row r emits tokens[r, : num_accepted[r] + 1]
    logprobs: np.ndarray | None = None  # [B, K+1] target log-prob of each emitted token


def verify_greedy(logits: mx.array, proposal: Proposal, want_logprobs: bool = False) -> Verdict:
    """Exact-match acceptance against the target's argmax at every window position.

    logits: [B, K+1, V] from one target forward over [last token, draft_1..draft_K].
    """
    num_accepted, tokens = greedy_outcome(logits, proposal)
    return make_verdict(logits, num_accepted, tokens, want_logprobs)


def greedy_outcome(logits: mx.array, proposal: Proposal) -> tuple[mx.array, mx.array]:
    """The greedy verdict as lazy device arrays: (num_accepted [B], emitted tokens [B, K+1])."""
    if proposal.tokens.shape[1] == 0:  # a plain round: the target's argmax is all there is
        B = logits.shape[0]  # (each op is a dispatch the CPU backend pays ~10-20 us for)
        return mx.zeros((B,), dtype=mx.int32), mx.argmax(logits, axis=-1).astype(mx.int32)
    draft = proposal.device_tokens()  # [B, K]
    counts = mx.array(np.asarray(proposal.counts).astype(np.int32))  # [B]
    target = mx.argmax(logits, axis=-1).astype(mx.int32)  # [B, K+1]
    num_accepted = greedy_accept(draft, counts, target)
    return num_accepted, emitted_tokens(draft, num_accepted, target)


def token_logprobs(logits: mx.array, tokens: mx.array) -> mx.array:
    """[B, K+1] the target's raw log-softmax at each emitted token (lazy)."""
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]


def make_verdict(
    logits: mx.array,  # [B, K+1, V] the verify forward's raw logits
    num_accepted: mx.array,  # [B]
    tokens: mx.array,  # [B, K+1] emitted tokens (valid prefix num_accepted + 1)
    want_logprobs: bool,
) -> Verdict:
    """Evaluate the accept outcome (one sync per round) and add each token's target logprob."""
    logprobs = token_logprobs(logits, tokens) if want_logprobs else None
    mx.eval(num_accepted, tokens, *([logprobs] if logprobs is not None else []))
    return Verdict(
        num_accepted=np.array(num_accepted, dtype=np.int64),
        tokens=np.array(tokens, dtype=np.int64),
        logprobs=None if logprobs is None else np.array(logprobs, dtype=np.float64),
    )
