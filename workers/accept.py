"""Accept/reject math: pure functions on arrays, one row per batch entry.

Vocabulary (as in vLLM's rejection sampler): a round verifies up to K draft tokens per row with
one target forward over K+1 positions. Position i's target output predicts the token after
draft i (position 0 follows the row's last committed token). A row accepts a prefix of its
drafts; the token after that prefix comes from the target: the *recovered* token at the first
rejection, or the *bonus* token when every draft passed. So a row always emits
num_accepted + 1 tokens: drafts[:num_accepted] then target_tokens[num_accepted].

Every function here reads row r's drafts and row r's target outputs only, at the same position
(seed 001: a verifier that reads another row's or position's top-1 commits wrong tokens at
depth > 2).
"""

from __future__ import annotations

import mlx.core as mx


def greedy_accept(
    draft_tokens: mx.array,  # [B, K] int32; entries past num_drafts[r] are ignored
    num_drafts: mx.array,  # [B] int32, 0 <= num_drafts[r] <= K
    target_tokens: mx.array,  # [B, K+1] int32, the target's choice at each position
) -> mx.array:
    """Number of leading drafts of each row that equal the target's choice: [B] int32."""
    B, K = draft_tokens.shape
    assert target_tokens.shape == (B, K + 1), (draft_tokens.shape, target_tokens.shape)
    if K == 0:
        return mx.zeros((B,), dtype=mx.int32)
    in_row = mx.arange(K)[None, :] < num_drafts[:, None]  # [B, K]
    match = (draft_tokens == target_tokens[:, :K]) & in_row  # [B, K]
    # Length of the all-true prefix: cumprod stays 1 until the first mismatch.
    return mx.cumprod(match.astype(mx.int32), axis=1).sum(axis=1).astype(mx.int32)


def emitted_tokens(
    draft_tokens: mx.array,  # [B, K]
    num_accepted: mx.array,  # [B]
    target_tokens: mx.array,  # [B, K+1]
) -> mx.array:
    """[B, K+1] tokens each row emits; row r's first num_accepted[r] + 1 entries are valid.

    Slot i < num_accepted holds draft i (== the target's choice for greedy); slot num_accepted
    holds the target's recovered or bonus token.
    """
    B, K = draft_tokens.shape
    padded = mx.concatenate([draft_tokens, mx.zeros((B, 1), draft_tokens.dtype)], axis=1)
    pos = mx.arange(K + 1)[None, :]
    return mx.where(pos < num_accepted[:, None], padded, target_tokens)
