"""Accept/reject math for every acceptance mode: pure functions on arrays, one row per batch entry.

Vocabulary (as in vLLM's rejection sampler): a round verifies up to K draft tokens per row with
one target forward over K+1 positions. Position i's target output predicts the token after
draft i (position 0 follows the row's last committed token). A row accepts a prefix of its
drafts; the token after that prefix comes from the target: the *recovered* token at the first
rejection, or the *bonus* token when every draft passed. So a row always emits
num_accepted + 1 tokens: drafts[:num_accepted] then target_tokens[num_accepted].

Modes (all share `emitted_tokens`):
- greedy_accept — accept while the draft equals the target's argmax.
- rejection_accept — speculative sampling (Leviathan et al. 2023, arXiv 2211.17192; Chen et al.
  2023): draft x_i ~ q_i; accept with probability min(1, p_i(x_i) / q_i(x_i)); at the first
  rejection emit a sample of norm(max(p_i - q_i, 0)); if all pass emit a bonus sample of p at
  the slot after the last draft. The emitted sequence is distributed exactly as the target's own
  sampling. (docs/field-failures.md, seed 003: a variant that resampled from p instead of the
  residual over-weights tokens the drafter already proposes; tests/workers/sampling shows
  the skew.)
- coupled_accept — the drafter sampled with the same (seed, position) Gumbel noise as the
  target (workers/sampling/keys.py), so accept while draft == the target's own seeded sample.
  Every emitted token is the target's sample at its position: token-identical to
  non-speculative seeded decoding.

Every function here reads row r's drafts and row r's target outputs only, at the same position
(docs/field-failures.md, seed 001: a verifier that read another position's top-1 committed
wrong tokens at depth > 2).
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


def rejection_accept(
    draft_tokens: mx.array,  # [B, K] int32; entries past num_drafts[r] are ignored
    num_drafts: mx.array,  # [B] int32
    q: mx.array | None,  # [B, K, V] draft probabilities; None = point-mass drafter (n-gram)
    p: mx.array,  # [B, K+1, V] target probabilities (after the row's processors)
    uniforms: mx.array,  # [B, K] acceptance uniforms in [0, 1)
    gumbel: mx.array,  # [B, K+1, V] Gumbel noise for recovered / bonus draws
) -> tuple[mx.array, mx.array]:
    """Returns (num_accepted [B] int32, emitted [B, K+1] int32)."""
    B, K = draft_tokens.shape
    V = p.shape[-1]
    assert p.shape == (B, K + 1, V), (p.shape, draft_tokens.shape)
    p = p.astype(mx.float32)
    in_row = mx.arange(K)[None, :] < num_drafts[:, None]  # [B, K]
    safe = mx.where(in_row, draft_tokens, 0).astype(mx.int32)  # padding may hold -1
    hot = safe[..., None] == mx.arange(V)[None, None, :]  # [B, K, V]
    if q is None:
        q = hot.astype(mx.float32)  # point mass at the proposed token (as vLLM does)
    q = q.astype(mx.float32)
    p_x = mx.take_along_axis(p[:, :K], safe[..., None], axis=-1)[..., 0]  # [B, K]
    q_x = mx.take_along_axis(q, safe[..., None], axis=-1)[..., 0]  # [B, K]
    # u < p/q written without division: q(x)=0 accepts iff p(x) > 0, p = q always accepts.
    ok = (uniforms * q_x < p_x) & in_row
    num_accepted = mx.cumprod(ok.astype(mx.int32), axis=1).sum(axis=1).astype(mx.int32)

    # Recovery distribution per slot: the residual where a draft stood, p at/after the last draft.
    residual = mx.maximum(p[:, :K] - q, 0.0)  # [B, K, V]
    drafted = in_row[..., None]
    # A residual with no mass (p <= q everywhere) cannot follow a rejection except through
    # rounding; fall back to p rather than produce NaN.
    empty = residual.sum(axis=-1, keepdims=True) <= 0
    recover = mx.where(drafted & ~empty, residual, p[:, :K])  # [B, K, V]
    recover = mx.concatenate([recover, p[:, K:]], axis=1)  # [B, K+1, V]
    log_r = mx.where(recover > 0, mx.log(mx.maximum(recover, 1e-38)), -mx.inf)
    target_tokens = mx.argmax(log_r + gumbel, axis=-1).astype(mx.int32)  # [B, K+1]
    return num_accepted, emitted_tokens(draft_tokens, num_accepted, target_tokens)


def coupled_accept(
    draft_tokens: mx.array,  # [B, K] int32, sampled with the target's (seed, position) noise
    num_drafts: mx.array,  # [B] int32
    target_tokens: mx.array,  # [B, K+1] int32, the target's seeded samples (or argmax)
) -> tuple[mx.array, mx.array]:
    """Accept while the draft equals the target's sample. Returns (num_accepted, emitted)."""
    num_accepted = greedy_accept(draft_tokens, num_drafts, target_tokens)
    return num_accepted, emitted_tokens(draft_tokens, num_accepted, target_tokens)
