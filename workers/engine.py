"""The worker engine: continuous batching with lossless batched speculative decoding.

    step() = take new work  ->  admit (prefill joiners)  ->  one speculative round

and the round is draft -> verify -> accept -> compact -> emit (see `_round`). Rows keep their
own accept counts; caches keep every row contiguous (workers.kv_cache). This module imports
neither grpc nor ray: the service (workers/service) and the cluster drive it through
add_request / abort / step / info.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import numpy as np

from workers.config import DEFAULT_MODEL_DIR, EngineConfig
from workers.depth_policy import DepthPolicy, row_depths
from workers.drafters.base import Drafter, DraftRequest, Proposal, empty_proposal
from workers.forward import forward_window, forward_window_hidden, pad_windows, prefill_chunk
from workers.kv_cache import BatchCache
from workers.loading import embedding_rows, make_drafter, upcast_on_cpu
from workers.rows import Row
from workers.sampling.round import RoundSampling
from workers.types import (
    Completion,
    EngineInfo,
    RequestOutput,
    RoundStats,
    SamplingParams,
)
from workers.verify import Verdict, verify_greedy


@dataclass
class _Prefill:
    rows: list[Row]
    cache: BatchCache
    done: int = 0  # tokens of each history already in `cache`
    hidden: list[mx.array] = field(default_factory=list)  # per chunk [n, W, H], MTP only


class Engine:
    def __init__(
        self,
        model: object,
        tokenizer: object | None = None,
        drafter: Drafter | None = None,
        **config: object,
    ):
        self.config = EngineConfig(**config)  # type: ignore[arg-type]
        self.model = model
        self.tokenizer = tokenizer
        self.drafter = drafter
        args = getattr(model, "args", None)
        self.vocab_size = int(getattr(args, "vocab_size", 0) or embedding_rows(model))
        self.max_context = self.config.max_context or int(
            getattr(args, "max_position_embeddings", 0) or 4096
        )
        self.kv_budget = (
            self.config.kv_budget_tokens or self.config.max_batch_size * self.max_context
        )
        self.eos_ids = frozenset(getattr(tokenizer, "eos_token_ids", None) or [])
        self.cache = BatchCache.for_model(model)
        self._needs_hidden = bool(getattr(drafter, "needs_target_hidden", False))
        # Hand an MTP head the hidden it reads; post-norm is the lm_head's input, free to return.
        self._post_norm = self._needs_hidden and getattr(drafter, "hidden_norm", "") == "post_norm"
        if self._post_norm:
            drafter.engine_hidden = "post_norm"  # type: ignore[union-attr]
        self.depth_policy = (
            DepthPolicy(self.config.draft_depth)
            if drafter is not None and self.config.adaptive_depth
            else None
        )
        self._verify_hidden: mx.array | None = None
        self._prefill: _Prefill | None = None  # rows being prefilled, chunk by chunk
        self.rows: list[Row] = []
        self.waiting: deque[Row] = deque()
        self._inbox: deque[tuple[str, object]] = deque()
        self._lock = threading.Lock()
        self._live_ids: set[str] = set()
        self._stats: list[RoundStats] = []
        self._next_id = 0

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        drafter: str | Drafter | None = None,
        **config: object,
    ) -> Engine:
        from mlx_lm import load

        model_dir = Path(path) if path is not None else DEFAULT_MODEL_DIR / "target"
        model, tokenizer = load(str(model_dir))[:2]
        upcast_on_cpu(model)
        config.setdefault("model_id", model_dir.name if path is not None else "specfleet-default")
        return cls(model, tokenizer, drafter=make_drafter(drafter, model_dir, model), **config)

    # -- public API (add_request / abort are thread-safe) --------------------------------------
    def add_request(
        self, request_id: str, prompt: Sequence[int] | str, params: SamplingParams | None = None
    ) -> None:
        row = self._make_row(request_id, prompt, params or SamplingParams())
        with self._lock:
            if request_id in self._live_ids:
                raise ValueError(f"request_id={request_id!r} is already running; use a unique id")
            self._live_ids.add(request_id)
            self._inbox.append(("add", row))

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._inbox.append(("abort", request_id))

    def has_work(self) -> bool:
        with self._lock:
            return bool(self.rows or self.waiting or self._inbox or self._prefill)

    def step(self) -> list[RequestOutput]:
        t0 = time.perf_counter()
        events = self._take_new_work()
        stats = RoundStats()
        self._admit(stats)
        events += self._drop_finished()  # aborted rows leave before the round computes them
        round_ = self._round(stats) if self.rows else None
        if stats.batch_size or stats.num_prefill_tokens:
            self._stats.append(stats)
        events += [e for r in self.rows if (e := r.take_event()) is not None]
        self._drop_finished()
        if round_ is not None and self.depth_policy is not None:
            proposal, verdict = round_
            step_s = time.perf_counter() - t0 - stats.time_prefill_s
            self.depth_policy.observe(proposal.counts, verdict.num_accepted, step_s)
        return events

    def take_round_stats(self) -> list[RoundStats]:
        stats, self._stats = self._stats, []
        return stats

    def info(self) -> EngineInfo:
        prefilling = self._prefill.rows if self._prefill else []
        return EngineInfo(
            model_id=self.config.model_id,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            drafter=getattr(self.drafter, "name", "none"),
            draft_depth=self.config.draft_depth,
            max_batch_size=self.config.max_batch_size,
            num_running=len(self.rows),
            num_waiting=len(self.waiting) + len(self._inbox) + len(prefilling),
            free_slots=max(
                0,
                self.config.max_batch_size - len(self.rows) - len(self.waiting) - len(prefilling),
            ),
            kv_budget_tokens=self.kv_budget,
            kv_used_tokens=sum(self._reserve(r) for r in self.rows + prefilling),
            eos_token_ids=sorted(self.eos_ids),
        )

    def generate(
        self,
        prompts: Sequence[Sequence[int] | str],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[Completion]:
        plist: list[SamplingParams | None] = (
            list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)  # type: ignore[list-item]
        )
        if len(plist) != len(prompts):
            raise ValueError(f"got {len(plist)} SamplingParams for {len(prompts)} prompts")
        ids = []
        for prompt, p in zip(prompts, plist):
            self._next_id += 1
            ids.append(f"generate-{self._next_id}")
            self.add_request(ids[-1], prompt, p)
        done: dict[str, Completion] = {}
        partial: dict[str, list[int]] = {i: [] for i in ids}
        logprobs: dict[str, list[float]] = {i: [] for i in ids}
        while len(done) < len(ids):
            for ev in self.step():
                if ev.request_id not in partial:
                    continue
                partial[ev.request_id] += ev.new_tokens
                logprobs[ev.request_id] += ev.new_logprobs or []
                if ev.finished:
                    assert ev.finish_reason is not None
                    done[ev.request_id] = Completion(
                        request_id=ev.request_id,
                        tokens=partial[ev.request_id],
                        text=self._decode(partial[ev.request_id]),
                        finish_reason=ev.finish_reason,
                        num_draft_tokens=ev.num_draft_tokens,
                        num_accepted_tokens=ev.num_accepted_tokens,
                        logprobs=logprobs[ev.request_id] if ev.new_logprobs is not None else None,
                        error=ev.error,
                    )
        return [done[i] for i in ids]

    # -- the speculative round ------------------------------------------------------------------
    def _round(self, stats: RoundStats) -> tuple[Proposal, Verdict]:
        """draft -> verify -> accept -> compact -> emit, for every running row at once."""
        t0 = time.perf_counter()
        sampling = self._sampling()  # None: every row greedy without penalties
        proposal = self._draft(sampling)
        t1 = time.perf_counter()
        verdict = self._verify(proposal, sampling)
        t2 = time.perf_counter()
        self.cache.commit(verdict.num_accepted + 1)  # last token + accepted drafts stay
        if self.drafter is not None:
            self.drafter.commit(verdict.num_accepted, self._verify_hidden)
        t3 = time.perf_counter()
        self._emit(proposal, verdict, stats)
        stats.time_draft_s, stats.time_verify_s, stats.time_compact_s = t1 - t0, t2 - t1, t3 - t2
        return proposal, verdict

    def _sampling(self) -> RoundSampling | None:
        return RoundSampling.for_rows(
            [r.params for r in self.rows],
            [r.seed for r in self.rows],
            [r.history for r in self.rows],
            [r.prompt_len for r in self.rows],
            self.vocab_size,
        )

    def _draft(self, sampling: RoundSampling | None = None) -> Proposal:
        depths = self._draft_depths()
        if self.drafter is None or depths.max(initial=0) == 0:
            return empty_proposal(len(self.rows))
        request = DraftRequest(histories=[r.history for r in self.rows], depths=depths)
        if sampling is not None:
            request.select = sampling.select  # per-row sampled drafts (and q for rejection)
        return self.drafter.propose(request)

    def _verify(self, proposal: Proposal, sampling: RoundSampling | None = None) -> Verdict:
        windows = [
            [r.history[-1], *proposal.tokens[i, : proposal.counts[i]].tolist()]
            for i, r in enumerate(self.rows)
        ]
        tokens, valid = pad_windows(windows, width=proposal.tokens.shape[1] + 1)
        self._verify_hidden = None
        if self._needs_hidden:
            # [B, K+1, H] hidden states (pre- or post-final-norm, as the MTP head reads them):
            # the head drafts the next round from them.
            self._verify_hidden, logits = forward_window_hidden(
                self.model, self.cache, tokens, valid, self._post_norm
            )
        else:
            logits = forward_window(self.model, self.cache, tokens, valid)  # [B, K+1, V]
        want_logprobs = any(r.params.logprobs for r in self.rows)
        if sampling is not None:
            return sampling.verify(logits, proposal, want_logprobs)
        return verify_greedy(logits, proposal, want_logprobs)

    def _emit(self, proposal: Proposal, verdict: Verdict, stats: RoundStats) -> None:
        K = proposal.tokens.shape[1]
        stats.batch_size = len(self.rows)
        stats.accepted_per_pos = [0] * K
        for i, row in enumerate(self.rows):
            n_draft, n_acc = int(proposal.counts[i]), int(verdict.num_accepted[i])
            row.num_draft_tokens += n_draft
            row.num_accepted_tokens += n_acc
            stats.num_drafts += n_draft > 0
            stats.num_draft_tokens += n_draft
            stats.num_accepted_tokens += n_acc
            stats.accepted_per_row.append(n_acc)
            for pos in range(n_acc):
                stats.accepted_per_pos[pos] += 1
            before = row.num_generated
            lp = None if verdict.logprobs is None else verdict.logprobs[i, : n_acc + 1].tolist()
            row.append(verdict.tokens[i, : n_acc + 1].tolist(), lp)
            stats.num_generated_tokens += max(0, row.num_generated - before)

    def _draft_depths(self) -> np.ndarray:
        """[B] per-row draft depth (workers/depth_policy.py::row_depths)."""
        B = len(self.rows)
        cap = self.depth_policy.choose(B) if self.depth_policy is not None else None
        return row_depths(
            self.rows, self.config.draft_depth, self.config.max_verify_tokens // max(B, 1), cap
        )

    # -- membership -----------------------------------------------------------------------------
    def _take_new_work(self) -> list[RequestOutput]:
        with self._lock:
            inbox, self._inbox = self._inbox, deque()
        events = []
        for kind, item in inbox:
            if kind == "add":
                assert isinstance(item, Row)
                self.waiting.append(item)
            else:
                events += self._abort_now(str(item))
        return events

    def _abort_now(self, request_id: str) -> list[RequestOutput]:
        for row in self.rows:
            if row.request_id == request_id and not row.is_finished:
                row.finish_reason = "abort"  # the round-end sweep drops it and emits the event
                return []
        for row in self._prefill.rows if self._prefill else []:
            if row.request_id == request_id and not row.is_finished:
                row.finish_reason = "abort"  # dropped (with its event) once its prefill joins
                return []
        for row in list(self.waiting):
            if row.request_id == request_id:
                self.waiting.remove(row)
                row.finish_reason = "abort"
                self._forget(row.request_id)
                event = row.take_event()
                return [event] if event else []
        return []  # unknown or already finished: aborting is idempotent

    def _admit(self, stats: RoundStats) -> None:
        """Prefill joining rows one chunk per step while others decode, then join them.

        Chunking the prefill bounds how long a long prompt stalls the running rows' tokens;
        with nothing running, the whole prompt goes through at once.
        """
        if self._prefill is None:
            joining = self._pick_joining()
            if not joining:
                return
            self._prefill = _Prefill(joining, BatchCache.for_model(self.model, len(joining)))
        p = self._prefill
        t0 = time.perf_counter()
        # The cache takes every history token but the last, which the next verify consumes.
        seqs = [r.history[:-1] for r in p.rows]
        longest = max(len(s) for s in seqs)
        step = self.config.prefill_step_size
        while p.done < longest:
            h = prefill_chunk(
                self.model, p.cache, seqs, p.done, step, self._needs_hidden, self._post_norm
            )
            if h is not None:
                p.hidden.append(h)
            p.done += step
            if self.rows:
                break
        stats.time_prefill_s = time.perf_counter() - t0
        if p.done < longest:
            return
        self._prefill = None
        stats.num_prefill_tokens = sum(r.prompt_len for r in p.rows)  # counted once, on joining
        self.cache.append(p.cache)
        if self.drafter is not None:
            hidden = mx.concatenate(p.hidden, axis=1) if p.hidden else None
            self.drafter.add_rows([r.history for r in p.rows], hidden)
        self.rows.extend(p.rows)

    def _pick_joining(self) -> list[Row]:
        joining: list[Row] = []
        used = sum(self._reserve(r) for r in self.rows)
        while self.waiting and len(self.rows) + len(joining) < self.config.max_batch_size:
            need = self._reserve(self.waiting[0])
            if used + need > self.kv_budget and (self.rows or joining):
                break
            used += need
            joining.append(self.waiting.popleft())
        return joining

    def _drop_finished(self) -> list[RequestOutput]:
        """Remove finished rows from the batch; returns the events they have not sent yet."""
        keep = [i for i, r in enumerate(self.rows) if not r.is_finished]
        if len(keep) == len(self.rows):
            return []
        events = []
        for r in self.rows:
            if r.is_finished:
                self._forget(r.request_id)
                events.append(r.take_event())
        self.rows = [self.rows[i] for i in keep]
        self.cache.keep_rows(keep)
        if self.drafter is not None:
            self.drafter.keep_rows(keep)
        return [e for e in events if e is not None]

    def _forget(self, request_id: str) -> None:
        with self._lock:
            self._live_ids.discard(request_id)

    def _reserve(self, row: Row) -> int:
        return self._reserve_tokens(row.prompt_len, row.params)

    # -- validation -----------------------------------------------------------------------------
    def _make_row(
        self, request_id: str, prompt: Sequence[int] | str, params: SamplingParams
    ) -> Row:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id={request_id!r} is invalid: pass a non-empty string")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params={params!r} is not a SamplingParams")
        tokens = self._encode(prompt) if isinstance(prompt, str) else list(prompt)
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
        if self._reserve_tokens(len(tokens), params) > self.kv_budget:
            raise ValueError(
                f"prompt length {len(tokens)} + max_tokens {params.max_tokens} exceeds the KV "
                f"budget of {self.kv_budget} tokens: lower max_tokens or shorten the prompt"
            )
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_ids))
        seqs = [tuple(self._encode(s)) if isinstance(s, str) else tuple(s) for s in params.stop]
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

    def _reserve_tokens(self, prompt_len: int, params: SamplingParams) -> int:
        return min(prompt_len + params.max_tokens, self.max_context)

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("text prompt given but the engine has no tokenizer: pass token ids")
        return list(self.tokenizer.encode(text, add_special_tokens=False))  # type: ignore[attr-defined]

    def _decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(tokens))  # type: ignore[attr-defined]
