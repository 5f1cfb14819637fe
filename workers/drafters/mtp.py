"""MTP-head drafter: the target's own multi-token-prediction layer drafts for the whole batch.

An MTP entry pairs the target's hidden state h_t with the next token x_{t+1} and predicts
x_{t+2} (workers/mtp/qwen35.py). Its ragged KV cache holds one entry per pair whose hidden came
from the target; chained entries (the head fed its own output to draft deeper) are dropped at
commit, because the next verify supplies the true hidden states for the accepted tokens.

Per round, for row r that accepted a_r drafts last round, the first MTP window holds a_r + 1
real pairs: (h of window position i, committed token after it), i = 0..a_r; its last output
proposes draft 1. Draft j > 1 chains (the head's output g, draft j-1). A row that just
joined has no verified hidden for its newest token yet, so it drafts nothing in its first round.

Which hidden the head reads (before or after the target's final norm; g before or after
`mtp.norm`) is the checkpoint's `specfleet_mtp_hidden` setting, `head.args.hidden_norm`
(workers/mtp/qwen35.py). The engine hands over the hidden named by `engine_hidden`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from workers.drafters.base import DraftRequest, Proposal, empty_proposal
from workers.forward import pad_windows
from workers.kv_cache import BatchCache
from workers.mtp.hidden import embed, final_norm, lm_head


class MTPDrafter:
    name = "mtp"
    needs_target_hidden = True

    def __init__(self, target: object, head: object, prefill_step_size: int = 512):
        if len(head.layers) != 1:  # type: ignore[attr-defined]
            raise ValueError(
                f"MTP heads with {len(head.layers)} layers are not supported yet "  # type: ignore[attr-defined]
                "(mtp_num_hidden_layers must be 1): use drafter='model:PATH' or 'ngram'"
            )
        self.target, self.head = target, head
        self.prefill_step_size = prefill_step_size
        # The hidden the engine passes to add_rows/commit: the target's pre-norm hidden, which a
        # 'post_norm' head gets through the target's final norm here (one RMSNorm per window).
        # An engine that asks its forward helpers for the post-norm hidden (post_norm=True: the
        # lm_head's input, free) sets this to "post_norm" and the norm is not computed twice.
        self.engine_hidden = "pre_norm"
        self.cache = BatchCache([False])
        # Verified hidden states not yet paired into the MTP cache, per row: [B, P, H] and the
        # number of valid pairs per row (0 for a row that has not been verified yet).
        self.pending: mx.array | None = None
        self.num_pending = np.zeros(0, dtype=np.int64)
        self._chained = np.zeros(0, dtype=np.int64)
        self.histories: list[Sequence[int]] = []  # live references to the rows' histories

    @classmethod
    def from_target(cls, target: object, model_dir: str | Path) -> MTPDrafter:
        import json

        from workers.mtp.hidden import text_model
        from workers.mtp.loader import load_mtp_head

        config = json.loads((Path(model_dir) / "config.json").read_text())
        head = load_mtp_head(model_dir, config)
        # Run the head in the target's dtype (fp32 when the engine upcast it for the CPU).
        head.set_dtype(text_model(target).model.embed_tokens.weight.dtype)
        return cls(target, head)

    @property
    def hidden_norm(self) -> str:
        """The target hidden the head reads: 'pre_norm' or 'post_norm' (checkpoint setting)."""
        return str(self.head.args.hidden_norm)  # type: ignore[attr-defined]

    # -- membership -----------------------------------------------------------------------------
    def add_rows(self, histories: Sequence[Sequence[int]], hidden: mx.array | None = None) -> None:
        """Pair each prompt's hidden states with its next tokens and run them into the cache."""
        n = len(histories)
        new = BatchCache([False], n)
        if hidden is not None:
            hidden = self._head_hidden(hidden)
            # Pair t: (h_t, x_{t+1}) for t = 0 .. len-2; hidden holds h_0 .. h_{len-2}.
            nexts = [list(h[1:]) for h in histories]
            for start in range(0, max(len(x) for x in nexts), self.prefill_step_size):
                windows = [x[start : start + self.prefill_step_size] for x in nexts]
                tokens, valid = pad_windows(windows)
                W = tokens.shape[1]
                h = _pad_axis1(hidden[:, start : start + W], W)
                self._step(new, h, tokens, valid)
                new.commit(valid)
                mx.eval(new.state_arrays())
        self.cache.append(new)
        self.histories.extend(histories)
        H = int(self.head.args.hidden_size)  # type: ignore[attr-defined]
        self.pending = _cat_rows(self.pending, mx.zeros((n, 1, H)))
        self.num_pending = np.concatenate([self.num_pending, np.zeros(n, dtype=np.int64)])

    def keep_rows(self, keep: Sequence[int]) -> None:
        idx = list(keep)
        self.cache.keep_rows(idx)
        if self.pending is not None:
            self.pending = self.pending[mx.array(np.asarray(idx, dtype=np.int32))] if idx else None
        self.num_pending = self.num_pending[idx]
        self.histories = [self.histories[i] for i in idx]

    # -- the round ------------------------------------------------------------------------------
    def propose(self, request: DraftRequest) -> Proposal:
        self.histories = list(request.histories)
        depths = np.where(self.num_pending > 0, np.asarray(request.depths, dtype=np.int64), 0)
        B, K = len(depths), int(depths.max(initial=0))
        first = self._absorb()
        if K == 0 or first is None:
            return empty_proposal(B)
        chain, normed, valid = first
        drafted, probs = [], []
        for step in range(K):
            last = mx.array((valid - 1).astype(np.int32))[:, None, None]  # [B, 1, 1]
            logits = lm_head(self.target, mx.take_along_axis(normed, last, axis=1))[:, 0]
            chosen, q = request.select(logits, step)  # [B], [B, V] | None
            drafted.append(chosen)
            probs.append(q)
            if step + 1 < K:  # chain: the head's own output and draft feed the next depth
                chained = mx.take_along_axis(chain, last, axis=1)  # [B, 1, H]
                valid = np.ones(B, dtype=np.int64)
                chain, normed = self._step(self.cache, chained, chosen[:, None], valid)
                self.cache.commit(valid)  # chained entries are dropped again at commit
        mx.eval(drafted, *self.cache.state_arrays())
        self._chained = np.full(B, K - 1, dtype=np.int64)
        out = np.array(mx.stack(drafted, axis=1), dtype=np.int32)  # [B, K]
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        return Proposal(tokens=out, counts=depths, probs=q_all)

    def commit(self, num_accepted: np.ndarray, hidden: mx.array | None = None) -> None:
        if self._chained.shape[0] == self.cache.num_rows:
            self.cache.rollback(self._chained)
        self._chained = np.zeros(0, dtype=np.int64)
        self._absorb()  # pairs left over when this round drafted nothing
        if hidden is None:
            return
        # Window position i's hidden pairs with the committed token after it: i = 0 .. a_r.
        self.pending = self._head_hidden(hidden)
        self.num_pending = np.asarray(num_accepted, dtype=np.int64) + 1

    def _absorb(self) -> tuple[mx.array, mx.array, np.ndarray] | None:
        """Run the pending verified pairs into the cache; outputs at each row's last pair.

        The pairs' tokens are the last num_pending[r] committed tokens of row r (the accepted
        drafts and the bonus token), so this must run before the round appends new tokens.
        """
        if self.pending is None or not self.num_pending.any():
            return None
        firsts = [list(h[len(h) - int(p) :]) for h, p in zip(self.histories, self.num_pending)]
        tokens, valid = pad_windows(firsts)
        has_pairs = valid > 0
        valid = np.maximum(valid, 1)  # rows without pairs compute one padding slot, kept out
        chain, normed = self._step(
            self.cache, _pad_axis1(self.pending, tokens.shape[1]), tokens, valid
        )
        self.cache.commit(np.where(has_pairs, valid, 0))
        self.num_pending = np.zeros_like(self.num_pending)
        return chain, normed, valid  # lazy: evaluated with the drafts (one sync per proposal)

    def _head_hidden(self, hidden: mx.array) -> mx.array:
        """The engine's hidden [B, L, H] as the head reads it (see `engine_hidden`)."""
        wanted = self.hidden_norm
        if self.engine_hidden == wanted:
            return hidden
        if self.engine_hidden == "pre_norm":  # and the head wants post_norm
            return final_norm(self.target, hidden)
        raise ValueError(
            f"engine_hidden={self.engine_hidden!r} but the MTP head reads {wanted!r} hiddens; "
            "hand this drafter the pre-norm target hidden (engine_hidden='pre_norm')"
        )

    def _step(
        self, cache: BatchCache, hidden: mx.array, tokens: mx.array, valid: np.ndarray
    ) -> tuple[mx.array, mx.array]:
        cache.set_window_valid(valid)
        return self.head.step(hidden, embed(self.target, tokens), cache=cache.layers[0])  # type: ignore[attr-defined]


def _pad_axis1(x: mx.array, width: int) -> mx.array:
    """Right-pad or cut axis 1 of x [B, P, H] to `width`."""
    if x.shape[1] >= width:
        return x[:, :width]
    return mx.pad(x, [(0, 0), (0, width - x.shape[1]), (0, 0)])


def _cat_rows(a: mx.array | None, b: mx.array) -> mx.array:
    if a is None:
        return b
    width = max(a.shape[1], b.shape[1])
    return mx.concatenate([_pad_axis1(a, width), _pad_axis1(b, width)])
