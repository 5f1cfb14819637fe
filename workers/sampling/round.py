"""One round's sampling state: the drafter's token selector and the sampled verify step.

Built per round from the running rows (per-row SamplingParams, seed, history). Every row picks
its own rule, in one batch:
- greedy (temperature 0): argmax of the penalised logits; exact match.
- coupled: the drafter samples with the target's (seed, position) Gumbel noise; accept while
  the draft equals the target's sample (workers.accept.coupled_accept).
- exact: the drafter samples with its own noise stream; accept on equality (the baseline that
  docs/field-failures.md, seed 003, measured at 5% acceptance). Lossless too: every emitted token is the target's sample.
- rejection: the drafter samples x ~ q with its own stream and reports q; Leviathan et al.'s
  rule (rejection_accept). Point-mass drafters (n-gram) report no q.

Window slot i of a row predicts the token at absolute position len(history) + i; all noise is
keyed by that position (keys.py), which is why drafter=None decoding, any depth and any batch
agree on what "seeded" means: greedy, coupled and exact rows emit exactly the plain seeded
tokens. A rejection row's tokens also depend on where its rounds start (its own accepts and
draft depth), so it is reproducible alone or batched while the batch does not clamp its depth
(EngineConfig.max_verify_tokens), and after a requeue it stays correctly distributed but may
differ. Logprobs are the target's raw log-softmax at each emitted token
(before penalties, temperature and filters), as vLLM reports by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from workers.accept import coupled_accept, rejection_accept
from workers.drafters.base import Proposal
from workers.sampling.keys import (
    STREAM_ACCEPT,
    STREAM_DRAFT,
    STREAM_TARGET,
    gumbel_noise,
    uniform_noise,
)
from workers.sampling.processors import (
    BatchSampling,
    apply_penalties,
    sample,
    token_presence,
    warp,
    window_presence,
)
from workers.types import SamplingParams
from workers.verify import Verdict, make_verdict


def row_mode(params: SamplingParams) -> str:
    return "greedy" if params.is_greedy else params.acceptance


@dataclass
class RoundSampling:
    bs: BatchSampling
    modes: tuple[str, ...]  # [B] "greedy" | "coupled" | "exact" | "rejection"
    starts: list[int]  # [B] absolute position of window slot 0 (= len(history))
    vocab_size: int  # V of the target
    seen: mx.array | None  # [B, V] bool, prompt + output tokens (None: no penalties)
    generated: mx.array | None  # [B, V] bool, output tokens
    _drafted: list[mx.array] = field(default_factory=list)  # tokens [B] chosen per draft step

    @classmethod
    def for_rows(
        cls,
        params: Sequence[SamplingParams],
        seeds: Sequence[int],
        histories: Sequence[Sequence[int]],
        prompt_lens: Sequence[int],
        vocab_size: int,
    ) -> RoundSampling | None:
        """None when every row is plain greedy (the engine's exact-match path is then exact)."""
        if all(p.is_greedy and not p.penalised for p in params):
            return None  # checked before building arrays: the greedy path stays free
        bs = BatchSampling.from_params(params, seeds)
        seen = generated = None
        if bs.any_penalty:
            seen = token_presence(histories, vocab_size)
            # A resumed (requeued) row's last num_resumed_tokens prompt tokens are output too.
            starts = [n - p.num_resumed_tokens for p, n in zip(params, prompt_lens, strict=True)]
            outs = [h[s:] for h, s in zip(histories, starts, strict=True)]
            generated = token_presence(outs, vocab_size)
        return cls(
            bs=bs,
            modes=tuple(row_mode(p) for p in params),
            starts=[len(h) for h in histories],
            vocab_size=vocab_size,
            seen=seen,
            generated=generated,
        )

    # -- drafting ---------------------------------------------------------------------------
    @property
    def needs_q(self) -> bool:
        return "rejection" in self.modes

    def _mask(self, mode: str) -> mx.array:
        return mx.array([m == mode for m in self.modes])  # [B] bool

    def select(self, logits: mx.array, step: int) -> tuple[mx.array, mx.array | None]:
        """Drafter hook (workers.drafters.base.TokenSelector): logits [B, Vd] at draft step
        `step` -> (tokens [B] int32, q [B, V] or None)."""
        if step == 0:
            self._drafted = []
        x = _fit_vocab(logits.astype(mx.float32), self.vocab_size)[:, None, :]  # [B, 1, V]
        if self.bs.any_penalty:
            drafts = mx.stack(self._drafted, axis=1) if self._drafted else _no_drafts(x)
            x = self._penalise(x, drafts, slot=step)
        warped = warp(x, self.bs)  # [B, 1, V]
        streams = [STREAM_TARGET if m == "coupled" else STREAM_DRAFT for m in self.modes]
        starts = [s + step for s in self.starts]
        noise = gumbel_noise(self.bs.seeds, starts, 1, self.vocab_size, streams)
        tokens = sample(warped, noise, self.bs)[:, 0]  # [B]
        self._drafted.append(tokens)
        q = mx.softmax(warped[:, 0], axis=-1) if self.needs_q else None  # [B, V]
        return tokens, q

    # -- verify -----------------------------------------------------------------------------
    def verify(self, logits: mx.array, proposal: Proposal, want_logprobs: bool = False) -> Verdict:
        """logits [B, K+1, V] of one target forward over [last token, drafts...]."""
        B, W, _ = logits.shape
        K = W - 1
        counts = mx.array(proposal.counts.astype(np.int32))  # [B]
        in_row = np.arange(K)[None, :] < proposal.counts[:, None]
        drafts = mx.array(np.where(in_row, proposal.tokens[:, :K], -1).astype(np.int32))  # [B, K]
        x = logits[..., : self.vocab_size].astype(mx.float32)
        if self.bs.any_penalty:
            x = self._penalise(x, drafts, slot=None)
        warped = warp(x, self.bs)  # [B, K+1, V]
        noise = gumbel_noise(self.bs.seeds, self.starts, W, self.vocab_size, STREAM_TARGET)
        target = sample(warped, noise, self.bs)  # [B, K+1] the target's own seeded samples
        num_accepted, tokens = coupled_accept(drafts, counts, target)
        if self.needs_q and K > 0:
            p = mx.softmax(warped, axis=-1)  # [B, K+1, V]
            q = proposal.probs
            q = None if q is None else _fit_vocab(q.astype(mx.float32), self.vocab_size, 0.0)[:, :K]
            u = uniform_noise(self.bs.seeds, self.starts, K, STREAM_ACCEPT)  # [B, K]
            n_rej, tok_rej = rejection_accept(drafts, counts, q, p, u, noise)
            # The bonus (every draft passed) is the target's own seeded sample at that slot.
            slot = mx.arange(W)[None, :]
            bonus = (slot == n_rej[:, None]) & (n_rej == counts)[:, None]
            tok_rej = mx.where(bonus, target, tok_rej)
            rej = self._mask("rejection")
            num_accepted = mx.where(rej, n_rej, num_accepted)
            tokens = mx.where(rej[:, None], tok_rej, tokens)
        return make_verdict(logits, num_accepted, tokens, want_logprobs)

    def _penalise(self, x: mx.array, drafts: mx.array, slot: int | None) -> mx.array:
        """Penalties for window slots (all if slot is None, else one draft step's slot)."""
        assert self.seen is not None and self.generated is not None
        width = x.shape[1] if slot is None else slot + 1
        seen = window_presence(self.seen, drafts, width)
        gen = window_presence(self.generated, drafts, width)
        if slot is not None:
            seen, gen = seen[:, slot:], gen[:, slot:]
        return apply_penalties(x, seen, gen, self.bs)


def _fit_vocab(x: mx.array, V: int, fill: float = -float("inf")) -> mx.array:
    """A draft model's vocabulary may be padded differently: cut, or pad with `fill`, to V."""
    Vd = x.shape[-1]
    if Vd == V:
        return x
    if Vd > V:
        return x[..., :V]
    pad = mx.full((*x.shape[:-1], V - Vd), fill, dtype=x.dtype)
    return mx.concatenate([x, pad], axis=-1)


def _no_drafts(x: mx.array) -> mx.array:
    return mx.zeros((x.shape[0], 0), dtype=mx.int32)
