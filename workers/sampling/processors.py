"""Per-row logits processing for a whole batch, each row with its own SamplingParams.

Order (as in vLLM / HF): penalties -> temperature -> top-k -> top-p -> min-p. The result
("warped logits", -inf outside the kept set) defines the row's sampling distribution
softmax(warped) and its seeded sample argmax(warped + gumbel) (see keys.py). Greedy rows
(temperature 0) get penalties only; their choice is argmax of the penalised logits.

Penalties over a verify window: window slot i predicts the token after draft i-1, so it sees the
row's context plus drafts[:i] (the same context a drafter saw when it proposed draft i). The
drafter and the target use the same functions, so both distributions are processed alike.
- repetition_penalty (HF/vLLM): a logit of a token already in prompt+output is divided by the
  penalty when positive, multiplied when negative.
- presence_penalty (OpenAI): subtracted once from every token already in the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from workers.types import SamplingParams


@dataclass(frozen=True)
class BatchSampling:
    """Per-row sampling parameters as arrays. Greedy rows carry neutral T/top-k/top-p/min-p."""

    temperature: mx.array  # [B] float32, 1.0 on greedy rows
    greedy: mx.array  # [B] bool
    top_k: mx.array  # [B] int32, 0 = off
    top_p: mx.array  # [B] float32, 1.0 = off
    min_p: mx.array  # [B] float32, 0.0 = off
    repetition_penalty: mx.array  # [B] float32, 1.0 = off
    presence_penalty: mx.array  # [B] float32, 0.0 = off
    seeds: tuple[int, ...]  # [B] per-row PRNG seeds (keys.py)
    greedy_rows: tuple[bool, ...]
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalty: bool

    @property
    def all_greedy(self) -> bool:
        return all(self.greedy_rows)

    @classmethod
    def from_params(cls, params: Sequence[SamplingParams], seeds: Sequence[int]) -> BatchSampling:
        if len(params) != len(seeds):
            raise ValueError(f"{len(params)} params but {len(seeds)} seeds")
        greedy = [p.is_greedy for p in params]

        def col(values: Sequence[float], dtype: mx.Dtype) -> mx.array:
            return mx.array(np.asarray(values), dtype=dtype)

        top_k = [0 if g else p.top_k for p, g in zip(params, greedy, strict=True)]
        top_p = [1.0 if g else p.top_p for p, g in zip(params, greedy, strict=True)]
        min_p = [0.0 if g else p.min_p for p, g in zip(params, greedy, strict=True)]
        rep = [float(p.repetition_penalty) for p in params]
        pres = [float(p.presence_penalty) for p in params]
        return cls(
            temperature=col(
                [1.0 if g else p.temperature for p, g in zip(params, greedy, strict=True)],
                mx.float32,
            ),
            greedy=col(greedy, mx.bool_),
            top_k=col(top_k, mx.int32),
            top_p=col(top_p, mx.float32),
            min_p=col(min_p, mx.float32),
            repetition_penalty=col(rep, mx.float32),
            presence_penalty=col(pres, mx.float32),
            seeds=tuple(int(s) for s in seeds),
            greedy_rows=tuple(greedy),
            any_top_k=any(k > 0 for k in top_k),
            any_top_p=any(p < 1.0 for p in top_p),
            any_min_p=any(m > 0.0 for m in min_p),
            any_penalty=any(r != 1.0 for r in rep) or any(x != 0.0 for x in pres),
        )


def token_presence(rows: Sequence[Sequence[int]], vocab_size: int) -> mx.array:
    """[B, V] bool: which token ids occur in each row's token list."""
    out = np.zeros((len(rows), vocab_size), dtype=bool)
    for b, toks in enumerate(rows):
        if len(toks):
            ids = np.asarray(toks, dtype=np.int64)
            out[b, ids[(ids >= 0) & (ids < vocab_size)]] = True
    return mx.array(out)


def window_presence(
    base: mx.array,  # [B, V] bool, tokens in the committed context
    drafts: mx.array,  # [B, K] int, draft tokens (pad with -1 past a row's drafts)
    width: int,  # W <= K + 1 window slots
) -> mx.array:
    """[B, W, V] bool: slot i sees base plus drafts[:i]."""
    B, V = base.shape
    K = drafts.shape[1]
    if width <= 1 or K == 0:
        return mx.broadcast_to(base[:, None, :], (B, width, V))
    n = min(K, width - 1)
    hot = drafts[:, :n, None] == mx.arange(V)[None, None, :]  # [B, n, V]
    seen = mx.cumsum(hot.astype(mx.int32), axis=1) > 0  # [B, n, V] after drafts[:i+1]
    seen = mx.concatenate([mx.zeros((B, 1, V), dtype=mx.bool_), seen], axis=1)  # [B, n+1, V]
    return base[:, None, :] | seen[:, :width, :]


def apply_penalties(
    logits: mx.array,  # [B, W, V]
    seen: mx.array,  # [B, W, V] bool, tokens in prompt + output (+ drafts so far)
    generated: mx.array,  # [B, W, V] bool, tokens in output (+ drafts so far)
    bs: BatchSampling,
) -> mx.array:
    if not bs.any_penalty:
        return logits
    rp = bs.repetition_penalty[:, None, None]
    pp = bs.presence_penalty[:, None, None]
    logits = logits.astype(mx.float32)
    penalised = mx.where(logits < 0, logits * rp, logits / rp)
    logits = mx.where(seen, penalised, logits)
    return logits - pp * generated.astype(mx.float32)


# Top-k / top-p look at the C best tokens only (a partial selection, then a sort of C values),
# trying C = 64 then 512: MLX's full sort of [B, W, V] costs ~50x more on CPU. Only when a row's
# top-k exceeds C or its nucleus is not inside its best C tokens at every level does warp fall
# back to the full sort, so the result never depends on C.
CANDIDATE_LEVELS = (64, 512)


def warp(
    logits: mx.array, bs: BatchSampling, candidates: tuple[int, ...] = CANDIDATE_LEVELS
) -> mx.array:
    """[B, W, V] -> [B, W, V] float32: temperature, then top-k / top-p / min-p as -inf masks."""
    x = logits.astype(mx.float32) / bs.temperature[:, None, None]
    if not (bs.any_top_k or bs.any_top_p or bs.any_min_p):
        return x
    V = x.shape[-1]
    neg_inf = mx.array(-mx.inf, dtype=mx.float32)
    if bs.any_top_k or bs.any_top_p:
        for C in [c for c in candidates if c < V]:
            best = mx.sort(mx.topk(x, C, axis=-1), axis=-1)[..., ::-1]  # [B, W, C]
            threshold, complete = _thresholds(x, best, bs)
            if mx.all(complete).item():
                break
        else:
            threshold, _ = _thresholds(x, mx.sort(x, axis=-1)[..., ::-1], bs)
        x = mx.where(x < threshold, neg_inf, x)
    if bs.any_min_p:
        m = bs.min_p[:, None, None]
        floor = x.max(axis=-1, keepdims=True) + mx.log(mx.maximum(m, 1e-30))
        x = mx.where((m > 0) & (x < floor), neg_inf, x)
    return x


def _thresholds(
    x: mx.array,  # [B, W, V] temperature-scaled logits
    ranked: mx.array,  # [B, W, C] the row's C largest values, descending (C <= V)
    bs: BatchSampling,
) -> tuple[mx.array, mx.array]:
    """(threshold [B, W, 1]: keep x >= threshold, complete [B, W]: C ranks sufficed)."""
    B, W, C = ranked.shape
    neg_inf = mx.array(-mx.inf, dtype=mx.float32)
    threshold = mx.full((B, W, 1), -mx.inf, dtype=mx.float32)
    complete = mx.ones((B, W), dtype=mx.bool_)
    rank = mx.arange(C)[None, None, :]
    if bs.any_top_k:
        k = mx.minimum(bs.top_k, x.shape[-1])[:, None, None]  # top_k >= V keeps everything
        on = k > 0
        kth = mx.take_along_axis(ranked, mx.clip(k - 1, 0, C - 1).astype(mx.int32), axis=-1)
        threshold = mx.where(on, mx.maximum(threshold, kth), threshold)
        ranked = mx.where(on & (rank >= k), neg_inf, ranked)
        complete = complete & (~on | (k <= C))[..., 0]
    if bs.any_top_p:
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token),
        # with the mass normalised over the whole (top-k filtered) vocabulary.
        lse = mx.logsumexp(mx.where(x >= threshold, x, neg_inf), axis=-1, keepdims=True)
        probs = mx.exp(ranked - lse)
        cum = mx.cumsum(probs, axis=-1)
        top_p = bs.top_p[:, None, None]
        n_keep = mx.maximum(((cum - probs) < top_p).sum(axis=-1, keepdims=True), 1)
        pth = mx.take_along_axis(ranked, (n_keep - 1).astype(mx.int32), axis=-1)
        on = top_p < 1.0
        threshold = mx.where(on, mx.maximum(threshold, pth), threshold)
        complete = complete & (~on | (cum[..., -1:] >= top_p))[..., 0]
    return threshold, complete


def sample(
    warped: mx.array,  # [B, W, V]
    noise: mx.array | None,  # [B, W, V] Gumbel noise (keys.py), None for an all-greedy batch
    bs: BatchSampling,
) -> mx.array:
    """[B, W] int32: argmax(warped + gumbel) on sampled rows, argmax(warped) on greedy rows."""
    if noise is None or bs.all_greedy:
        return mx.argmax(warped, axis=-1).astype(mx.int32)
    noisy = mx.where(bs.greedy[:, None, None], warped, warped + noise)
    return mx.argmax(noisy, axis=-1).astype(mx.int32)
