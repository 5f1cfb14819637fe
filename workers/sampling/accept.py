"""Sampled acceptance: rejection (Leviathan et al.) and coupled, as pure functions on arrays.

Shapes and vocabulary follow workers/accept.py: a row verifies num_drafts[r] <= K drafts with
target distributions at K+1 window slots and emits num_accepted + 1 tokens: its accepted drafts,
then the *recovered* token (first rejection) or the *bonus* token (all drafts passed).

rejection_accept — speculative sampling (Leviathan et al. 2023, arXiv 2211.17192; Chen et al.
2023): draft x_i ~ q_i; accept with probability min(1, p_i(x_i) / q_i(x_i)); at the first
rejection emit a sample of norm(max(p_i - q_i, 0)); if all pass emit a bonus sample of p at the
slot after the last draft. The emitted sequence is distributed exactly as the target's own
sampling. (Seed 003 resampled from p instead of the residual: that over-weights tokens the
drafter already proposes, and tests/workers/sampling shows the skew.)

coupled_accept — the drafter sampled with the same (seed, position) Gumbel noise as the target
(keys.py), so accept while draft == the target's own seeded sample. Every emitted token is the
target's sample at its position: token-identical to non-speculative seeded decoding.
"""

from __future__ import annotations

import mlx.core as mx

from workers.accept import emitted_tokens, greedy_accept


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
