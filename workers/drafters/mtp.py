"""MTP-head drafter: the target's own multi-token-prediction layer drafts for the whole batch.

An MTP entry pairs the target's hidden state h_t with the next token x_{t+1} and predicts
x_{t+2} (workers/mtp/qwen35.py). Its ragged KV cache holds one entry per pair whose hidden came
from the target; chained entries (the head fed its own output to draft deeper) are dropped at
commit, because the next verify supplies the true hidden states for the accepted tokens.

Per round, for row r that accepted a_r drafts last round, the first MTP window holds a_r + 1
real pairs: (h of window position i, committed token after it), i = 0..a_r; its last output
proposes draft 1. Rounds that draft nothing (adaptive depth 0) leave their pairs in a backlog;
the next drafting round runs the whole backlog through the head as one window (`Pairs.packed`),
so an MTP head the depth policy has switched off costs no head step at all: past `max_backlog`
verifies the oldest pairs are dropped, and a row that lost pairs restarts its head cache from the
pairs kept when drafting resumes (the head drafts from local context: the default model's
acceptance is 0.534 with 32 pairs of context against 0.552 with all). Draft j > 1 chains (the
head's output g, draft j-1). A joining prompt enters the head through its last `prompt_window`
pairs only, the last of them held in the backlog: its output drafts the row's first round, as a
verify's newest pair drafts the next round.

Which hidden the head reads (before or after the target's final norm; g before or after
`mtp.norm`) is the checkpoint's `specfleet_mtp_hidden` setting, `head.args.hidden_norm`
(workers/mtp/qwen35.py). The engine hands over the hidden named by `engine_hidden`.

On MLX's CPU backend `Engine.load` runs a Qwen3-layout head's steps in NumPy instead
(workers/drafters/mtp_host.py: this class's rounds and bookkeeping, the host's head steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from workers import launch
from workers.compiled_step import CompiledStep
from workers.drafters.base import DraftRequest, Proposal, empty_proposal
from workers.drafters.mtp_pairs import Pairs, hold_last_pairs
from workers.forward import pad_windows_host
from workers.kv_cache import SPAN, BatchCache
from workers.mtp.hidden import embed, final_norm, lm_head, shared_modules, text_model


class MTPDrafter:
    name = "mtp"
    needs_target_hidden = True
    device_resident = True

    def __init__(
        self, target: object, head: object, prefill_step_size: int = 512, prompt_window: int = 64
    ):
        if len(head.layers) != 1:  # type: ignore[attr-defined]
            raise ValueError(
                f"MTP heads with {len(head.layers)} layers are not supported yet "  # type: ignore[attr-defined]
                "(mtp_num_hidden_layers must be 1): use drafter='model:PATH' or 'ngram'"
            )
        self.target, self.head = target, head
        self.prefill_step_size = prefill_step_size
        # The head reads a joining prompt's last `prompt_window` pairs only: its prefill costs a
        # decoder layer per position (on the default model ~12% of the target's prefill), and a
        # one-layer head drafts from local context (default model, 24 held-out prompts, depth 3:
        # 0.546 of drafts accepted with 64 pairs, 0.552 with the whole prompt, 0.534 with 32).
        self.prompt_window = prompt_window
        # The hidden the engine passes to add_rows/commit: the target's pre-norm hidden, which a
        # 'post_norm' head gets through the target's final norm here (one RMSNorm per window).
        # An engine that asks its forward helpers for the post-norm hidden (post_norm=True: the
        # lm_head's input, free) sets this to "post_norm" and the norm is not computed twice.
        self.engine_hidden = "pre_norm"
        self.cache = BatchCache([False])
        # Verified pairs not yet run into the MTP cache, one entry per verify since the last
        # absorb (rounds that draft nothing leave them here: absorbing several rounds at once is
        # one head step instead of one per round), all on the device so that a round can be
        # built before the host has read the last one. `ready` [B] (host): the row has been
        # verified at least once; a row that just joined has no verified hidden for its newest
        # token and drafts nothing.
        self.backlog: list[Pairs] = []
        # Verifies kept waiting (bounds memory); past this the oldest are dropped and the rows
        # that had pairs in them restart their head cache from the rest (`_absorb`).
        self.max_backlog = 16
        self._waiting = np.zeros(0, dtype=np.int64)  # [B] backlog entries holding the row's pairs
        self._restart = np.zeros(0, dtype=bool)  # [B] head cache misses dropped pairs
        # Round a packed backlog window up to a multiple of this: its width is the sum of the
        # widths waiting, so each new mix is a new head-step shape (the engine sets 8 where
        # shapes cost a build, CUDA; see workers/backend.py).
        self.pad_packed_to = 1
        self.ready = np.zeros(0, dtype=bool)
        self._chained = np.zeros(0, dtype=np.int64)
        self.histories: list[Sequence[int]] = []  # live references to the rows' histories
        self.compiled: CompiledStep | None = None  # see compile_steps
        self._at_first: dict[int, mx.array] = {}  # B -> a chained step's read index (`_chain`)

    @classmethod
    def from_target(cls, target: object, model_dir: str | Path) -> MTPDrafter:
        import json

        from workers.mtp.loader import load_mtp_head

        config = json.loads((Path(model_dir) / "config.json").read_text())
        head = load_mtp_head(model_dir, config)
        # Run the head in the target's dtype (fp32 when the engine upcast it for the CPU). A
        # quantized embedding stores uint32 weights: its scales carry the float dtype.
        embed = text_model(target).model.embed_tokens
        head.set_dtype(getattr(embed, "scales", embed.weight).dtype)
        return cls(target, head)

    @property
    def hidden_norm(self) -> str:
        """The target hidden the head reads: 'pre_norm' or 'post_norm' (checkpoint setting)."""
        return str(self.head.args.hidden_norm)  # type: ignore[attr-defined]

    # -- membership -----------------------------------------------------------------------------
    def add_rows(self, histories: Sequence[Sequence[int]], hidden: mx.array | None = None) -> None:
        """Pair each prompt's hidden states with its next tokens and run them into the cache."""
        new = self._new_cache(len(histories))
        held = None
        if hidden is not None:
            # Pair t: (h_t, x_{t+1}); hidden holds each row's last min(prompt_window, len - 1)
            # h_t, t = start .. len-2 (the Drafter protocol), so only those pairs enter the head.
            starts = [max(0, len(h) - 1 - self.prompt_window) for h in histories]
            hidden = self._head_hidden(hidden)
            nexts = [list(h[s + 1 :]) for h, s in zip(histories, starts)]
            held = hold_last_pairs(hidden, nexts)
            if held is not None:  # the last pair of each row waits in the backlog instead
                nexts = [x[:-1] for x in nexts]
            longest = max(len(x) for x in nexts)
            source = self._pairs_hidden(hidden)
            for start in range(0, longest, self.prefill_step_size):
                windows = [x[start : start + self.prefill_step_size] for x in nexts]
                tokens, valid = pad_windows_host(windows)  # [n, W] right-padded, [n]
                self._prompt_pairs(new, source[:, start : start + tokens.shape[1]], tokens, valid)
                # Free a chunk's graph before the next (launched, not waited for). The last
                # stays lazy and runs with the first round that drafts from it.
                if start + self.prefill_step_size < longest:
                    launch.evaluate_behind(new.state_arrays())
        self.cache.append(new)
        self._joined(histories, held)

    def _new_cache(self, n: int) -> BatchCache:
        """The cache rows of n joiners (the host drafter's are a HostCache)."""
        return BatchCache([False], n)

    def _pairs_hidden(self, hidden: mx.array) -> mx.array:
        """The joiners' pair hidden [n, P, H] as `_prompt_pairs` reads it."""
        return hidden

    def _prompt_pairs(
        self, new: BatchCache, hidden: mx.array, tokens: np.ndarray, valid: np.ndarray
    ) -> None:
        """Run one chunk of the joiners' prompt pairs into their new cache rows: tokens [n, W]
        (right-padded), valid [n] real pairs a row, hidden [n, <= W, H] theirs (a row shorter
        than W is padded here). Their keys and values are what the head keeps."""
        W = tokens.shape[1]
        new.set_window_valid(valid)
        self._head_step(new.layers[0], _pad_axis1(hidden, W), mx.array(tokens))
        new.commit(valid)

    def _joined(self, histories: Sequence[Sequence[int]], held: Pairs | None = None) -> None:
        """The bookkeeping of rows appended (their cache rows already are); `held`: each
        joiner's last prompt pair (`hold_last_pairs`), queued for the first drafting round."""
        n = len(histories)
        self.histories.extend(histories)
        self.ready = np.concatenate([self.ready, np.zeros(n, dtype=bool)])
        self._waiting = np.concatenate([self._waiting, np.zeros(n, dtype=np.int64)])
        self._restart = np.concatenate([self._restart, np.zeros(n, dtype=bool)])
        self.backlog = [p.with_rows_added(n) for p in self.backlog]  # no pairs for joiners
        if held is not None and held.count_host is not None:  # (its counts are the host's)
            before = self.cache.num_rows - n
            joined = np.concatenate([np.zeros(before, dtype=bool), held.count_host > 0])
            self._push(held.with_rows_added(before, at_start=True), joined)
            self.ready |= joined

    def keep_rows(self, keep: Sequence[int]) -> None:
        idx = list(keep)
        self.cache.keep_rows(idx)
        self.ready = self.ready[idx]
        self._waiting, self._restart = self._waiting[idx], self._restart[idx]
        self.histories = [self.histories[i] for i in idx]
        self.backlog = [p.with_rows(idx) for p in self.backlog] if idx else []

    def tighten(self, bounds: np.ndarray, rows: np.ndarray) -> None:
        """The host learnt the target cache's committed lengths after the round whose pairs were
        absorbed last. After `commit` (chain rolled back) the MTP cache holds one entry per such
        slot, so those lengths bound ours (BatchCache.tighten)."""
        self.cache.tighten(bounds, rows)

    # -- the round ------------------------------------------------------------------------------
    def propose(self, request: DraftRequest) -> Proposal:
        """Chain the head K steps for every row, all on the device (no host sync): the
        proposal's tokens stay a lazy [B, K] array that the verify forward consumes."""
        self.histories = list(request.histories)
        depths = np.asarray(request.depths, dtype=np.int64) * self.ready  # 0 where not ready
        B, K = len(depths), int(depths.max(initial=0))
        if K == 0:
            return empty_proposal(B)  # the pairs wait in the backlog for a drafting round
        first = self._absorb()
        if first is None:
            return empty_proposal(B)
        chain, logits = first  # [B, 1, H], [B, V] at each row's last valid pair
        drafted, probs = [], []
        for step in range(K):
            chosen, q = self._select(request, logits, step)  # [B], [B, V] | None
            drafted.append(chosen)
            probs.append(q)
            if step + 1 < K:  # chain: the head's own output and draft feed the next depth
                chain, logits = self._chain(chain, chosen)
        self._chained = np.full(B, K - 1, dtype=np.int64)  # dropped again at commit
        q_all = None if probs[0] is None else mx.stack([q for q in probs if q is not None], axis=1)
        return Proposal(tokens=self._stack(drafted), counts=depths, probs=q_all)

    # The round's steps, as MLX graphs (HostMTPDrafter overrides these on the host).
    def _select(self, request: DraftRequest, logits: mx.array, step: int) -> tuple:
        return request.select(logits, step)

    def _chain(self, chain: mx.array, chosen: mx.array) -> tuple[mx.array, mx.array]:
        """One chained step: (chain [B, 1, H], logits [B, V]) after the drafts `chosen` [B]."""
        B = chosen.shape[0]
        ones = np.ones(B, dtype=np.int64)
        at = self._at_first.get(B)
        if at is None:  # [B] int32 zeros: a chained step reads its one pair; made once per B
            at = self._at_first[B] = mx.zeros((B,), dtype=mx.int32)
        out = self._step(chain, chosen[:, None], ones, at)
        self.cache.commit(ones)
        return out

    def _stack(self, drafted: list) -> mx.array:
        return mx.stack(drafted, axis=1)  # [B, K]

    def commit(
        self,
        num_accepted: np.ndarray | mx.array,
        hidden: mx.array | None = None,
        tokens: mx.array | None = None,
    ) -> None:
        """num_accepted [B] (host or device), hidden [B, K+1, H] of the verify window and the
        tokens [B, K+1] each row committed (its first num_accepted + 1 are valid)."""
        if self._chained.shape[0] == self.cache.num_rows and self._chained.any():
            self.cache.rollback(self._chained)
        self._chained = np.zeros(0, dtype=np.int64)
        if hidden is not None:
            self._queue_pairs(num_accepted, hidden, tokens)

    def _queue_pairs(
        self, num_accepted: np.ndarray | mx.array, hidden: mx.array, tokens: mx.array | None
    ) -> None:
        """Queue a verify's pairs in the backlog (lazy: no host read)."""
        if tokens is None:
            raise ValueError("MTPDrafter.commit needs the committed tokens with the hidden")
        # Window position i's hidden pairs with the committed token after it: i = 0 .. a_r.
        tok = mx.array(tokens) if isinstance(tokens, np.ndarray) else tokens
        if isinstance(num_accepted, mx.array):
            pairs = Pairs(self._head_hidden(hidden), tok, num_accepted.astype(mx.int32) + 1)
        else:
            host = np.asarray(num_accepted, dtype=np.int64) + 1
            pairs = Pairs(self._head_hidden(hidden), tok, mx.array(host.astype(np.int32)), host)
        self.ready = np.ones(self.cache.num_rows, dtype=bool)
        self._push(pairs, self.ready)

    def _push(self, pairs: Pairs, rows: np.ndarray) -> None:
        """Queue one backlog entry; `rows` [B] bool: the rows it holds pairs for. A row's
        entries are always its newest `_waiting` ones (every verify holds pairs for every row)."""
        self.backlog.append(pairs)
        self._waiting += rows
        if len(self.backlog) > self.max_backlog:  # no round has drafted for a while
            self.backlog = self.backlog[-self.max_backlog :]
            self._restart |= self._waiting > self.max_backlog
            self._waiting = np.minimum(self._waiting, self.max_backlog)

    def _absorb(self) -> tuple[mx.array, mx.array] | None:
        """Run every backlogged verified pair into the cache in one head step; returns the
        step's outputs at each row's last pair (chain [B, 1, H], logits [B, V])."""
        pairs = self._take_backlog()
        if pairs is None:
            return None
        W = pairs.tokens.shape[1]
        last = mx.maximum(pairs.count - 1, 0)
        outs = self._step(pairs.hidden, pairs.tokens, np.full(self.cache.num_rows, W), last)
        if pairs.count_host is not None:
            self.cache.commit(pairs.count_host)
        else:  # counts still on the device: the host keeps an upper bound
            self.cache.commit_lazy(pairs.count, W)
        return outs  # lazy: evaluated with the verify that consumes the drafts

    def _take_backlog(self) -> Pairs | None:
        """Every backlogged pair as one window (None: none waiting); empties the backlog, and
        empties the cache rows that lost pairs, which restart from the window's."""
        if not self.backlog:
            return None
        if self._restart.any():  # their cache has a gap: restart it from the kept pairs
            self.cache.reset_rows(self._restart)
            self._restart[:] = False
        if len(self.backlog) == 1:
            pairs = self.backlog[0]
        else:
            pairs = Pairs.packed(self.backlog, self.pad_packed_to)
        self.backlog = []
        self._waiting[:] = 0
        return pairs

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
        self, hidden: mx.array, tokens: mx.array, valid: np.ndarray, last: mx.array
    ) -> tuple[mx.array, mx.array]:
        """One head step over a window of pairs, hidden [B, W, H] and tokens [B, W]; returns
        the chain hidden [B, 1, H] and the logits [B, V] at each row's index `last` [B]."""
        self.cache.set_window_valid(valid)
        if self.compiled is None:
            return self._head_window(self.cache.layers[0], hidden, tokens, last)
        chain, logits = self.compiled(self.cache, tokens.shape[1], hidden, tokens, last)
        return chain, logits

    def _head_window(
        self, layer: object, hidden: mx.array, tokens: mx.array, last: mx.array
    ) -> tuple[mx.array, mx.array]:
        """The head's step on one layer cache, read at each row's `last` pair (the function
        `compiled` traces)."""
        chain, normed = self._head_step(layer, hidden, tokens)
        idx = last[:, None, None]  # [B, 1, 1]
        at_last = mx.take_along_axis(normed, idx, axis=1)  # [B, 1, H]
        return mx.take_along_axis(chain, idx, axis=1), lm_head(self.target, at_last)[:, 0]

    def _head_step(
        self, layer: object, hidden: mx.array, tokens: mx.array
    ) -> tuple[mx.array, mx.array]:
        """(chain, normed) [B, W, H] of the head over pairs (hidden [B, W, H], tokens [B, W])."""
        return self.head.step(hidden, embed(self.target, tokens), cache=layer)  # type: ignore[attr-defined,no-any-return]

    def compile_steps(self) -> None:
        """Run head steps as compiled graphs (workers/compiled_step.py): where each new shape
        costs a graph build anyway (MLX CUDA) and the host, not the device, bounds a round."""
        reads: list = [self.head, *shared_modules(self.target)]  # the head's weights, the target's
        self.compiled = CompiledStep(self._head_window, reads)
        # Each attention span is a trace of its own: spans rounded up to SPAN (as MLX CUDA's
        # caches already are) let one trace serve SPAN steps; exact spans (the CPU, Metal) would
        # trace every step.
        self.cache.span = SPAN


def _pad_axis1(x: mx.array, width: int) -> mx.array:
    """Right-pad or cut axis 1 of x [B, P, H] to `width`."""
    if x.shape[1] >= width:
        return x[:, :width]
    return mx.pad(x, [(0, 0), (0, width - x.shape[1]), (0, 0)])
