"""The worker engine: continuous batching with lossless batched speculative decoding.

    step() = take new work  ->  admit (prefill joiners)  ->  one speculative round

and the round is draft -> verify -> accept -> compact -> emit (see `_round`). Rows keep their
own accept counts; caches keep every row contiguous (workers.kv_cache). This module imports
neither grpc nor ray: the service (workers/service) and the cluster drive it through
add_request / abort / step / info.

Pipelined rounds (workers/pipeline.py): while every row is greedy and the drafter keeps its
state on the device, a step launches round N+1 before it collects round N. Other batches
(sampling, penalties, host-side drafters that are drafting) run one synchronous round per step;
greedy tokens are the same either way.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from workers import launch, routes
from workers.backend import Backend
from workers.config import DEFAULT_MODEL_DIR, EngineConfig
from workers.depth_policy import DepthPolicy
from workers.drafters.base import Drafter, Proposal
from workers.drafting import attach_drafter, propose_round
from workers.forward import forward_window, forward_window_hidden
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant, token_budget
from workers.language_model import LanguageModel
from workers.launch import Launcher
from workers.loading import embedding_rows, make_drafter, upcast_on_cpu
from workers.membership import Membership
from workers.pipeline import Flight, last_tokens, settle_before
from workers.prefill_job import Prefill
from workers.prefix_cache import PrefixCache
from workers.row_factory import RowFactory
from workers.rows import Row, emit_round
from workers.sampling.round import RoundSampling
from workers.types import (
    Completion,
    EngineInfo,
    RequestOutput,
    RoundStats,
    SamplingParams,
)
from workers.verify import Verdict, greedy_outcome, token_logprobs, verify_greedy
from workers.warm_up import warm_up


class Engine(Membership):
    # False: rows leave and join a routed batch as before stop 41, unrouted after a settle
    # (bench/p5_pairs.py --ab-join compares the two in one process)
    route_joins = True

    def __init__(
        self,
        model: LanguageModel,
        tokenizer: object | None = None,
        drafter: Drafter | None = None,
        **config: object,
    ):
        self.config = EngineConfig(**config)  # type: ignore[arg-type]
        # Pipelined rounds launch from a thread of their own where the launch is host work
        # apart from the compute (a GPU: workers/launch.py); the engine's arrays then live on
        # that thread's stream from its weights on.
        backend = Backend.current()  # what new shapes and launches cost (workers/backend.py)
        self._launcher: Launcher | None = None
        self._launch_rows = launch.rows_min(backend)
        if self.config.pipeline and self._launch_rows is not None:
            launch.materialize(model, drafter)
            self._launcher = launch.process_launcher()
            self._launcher.adopt()
        self.model = model
        self.tokenizer = tokenizer
        self.drafter = drafter
        args = getattr(model, "args", None)
        self.vocab_size = int(getattr(args, "vocab_size", 0) or embedding_rows(model))
        self.max_context = self.config.max_context or int(
            getattr(args, "max_position_embeddings", 0) or 4096
        )
        self.eos_ids = frozenset(getattr(tokenizer, "eos_token_ids", None) or [])
        bits, group = self.config.kv_bits, self.config.kv_group_size
        self.kv_quant = KVQuant.for_device(bits, group) if bits is not None else None
        # Rows join and leave the running cache in place (workers/cache_rows.py), except where
        # rounds launch from a launcher thread (a leave evaluates the rows it moves, which there
        # would have to queue behind the launch) or each new shape is a graph build (the spare
        # rows' writes are shapes of their own): measured on the CPU only (bench/results/s50).
        in_place = self._launcher is None and not backend.builds_per_shape
        capacity = self.config.max_batch_size if in_place else 0
        self.cache = BatchCache.for_model(model, quant=self.kv_quant, row_capacity=capacity)
        # Admission counts bytes: kv_budget is how many tokens of this cache fit in the memory
        # of kv_budget_tokens unquantized ones (workers/kv_quant.py).
        self.kv_bytes_per_token, self.kv_budget = token_budget(
            model,
            self.cache.recurrent,
            self.kv_quant,
            self.config.kv_budget_tokens or self.config.max_batch_size * self.max_context,
        )
        self.cache.slot_budget = self.kv_budget  # spare rows within what admission allows
        self.row_factory = RowFactory(
            tokenizer, self.vocab_size, self.max_context, self.kv_budget, self.eos_ids
        )
        prefix_tokens = self.config.prefix_cache_tokens
        self.prefix_cache = PrefixCache(
            self.kv_budget // 4 if prefix_tokens == -1 else prefix_tokens,
            self.config.prefix_block_tokens,
            self.cache.recurrent,
        )
        self.pad_verify = backend.builds_per_shape  # one graph per round shape; one-batch prefill
        routes.install(model, backend)  # fewer launches / graph nodes per forward, same numbers
        # A drafter that can never pay is set aside (drafter_off says why): the engine runs plain.
        attached = attach_drafter(drafter, model, self.config, backend)
        drafter = self.drafter = attached.drafter
        self._needs_hidden, self._post_norm = attached.needs_hidden, attached.post_norm
        self.depth_policy, self.drafter_off = attached.policy, attached.off
        # Only where a depth policy reads each round's time, and only when a round's shape
        # changes (pipeline.settle_before): each wait costs the overlap of building a round with
        # the last one's tail (6% of a plain engine at B=1 on the CPU).
        self._wait_before_launch = backend.computes_in_launch and self.depth_policy is not None
        self._verify_hidden: mx.array | None = None
        self._flight: Flight | None = None  # pipelined round launched, not read yet
        self._device_drafter = drafter is None or bool(getattr(drafter, "device_resident", False))
        self._prefill: Prefill | None = None  # rows being prefilled, chunk by chunk
        self._quiet_steps = 0  # steps since a request last arrived
        self.rows: list[Row] = []
        self.waiting: deque[Row] = deque()
        self._inbox: deque[tuple[str, object]] = deque()
        self._lock = threading.Lock()
        self._live_ids: set[str] = set()
        self._stats: list[RoundStats] = []
        self._next_id = 0
        if self.config.warm_up:
            warm_up(self)

    @property
    def depth_policy(self) -> DepthPolicy | None:
        return self._depth_policy

    @depth_policy.setter
    def depth_policy(self, policy: DepthPolicy | None) -> None:
        """A policy set here (or handed on from another engine) weighs this engine's rows at
        a job's end (`DepthPolicy.job_view`), held weakly: no engine-policy cycle."""
        self._depth_policy = policy
        if policy is not None:
            engine = weakref.ref(self)
            policy.job_view = lambda: e._job_view() if (e := engine()) is not None else None

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
        upcast_on_cpu(model, keep_quantized=bool(config.get("keep_quantized")))
        config.setdefault("model_id", model_dir.name if path is not None else "specfleet-default")
        return cls(model, tokenizer, drafter=make_drafter(drafter, model_dir, model), **config)

    # -- public API (add_request / abort are thread-safe) --------------------------------------
    def add_request(
        self, request_id: str, prompt: Sequence[int] | str, params: SamplingParams | None = None
    ) -> None:
        row = self.row_factory.make(request_id, prompt, params or SamplingParams())
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
            return bool(self.rows or self.waiting or self._inbox or self._prefill or self._flight)

    def step(self) -> list[RequestOutput]:
        """One round: new requests join, the round in flight is read back and emitted, the
        next is launched. On a GPU that launch may still be encoding when this returns (from
        the launcher thread, workers/launch.py): other MLX work on this thread between steps
        calls `settle()` first."""
        if self._launcher is None:
            launch.idle()  # on a thread that has adopted a launcher's stream: its last launch
            return self._step()
        self._launcher.adopt()  # this thread's ops on the launcher's stream (launch.py)
        try:
            return self._step()
        except BaseException:
            self._launcher.idle()  # a launch handed over may be encoding: the caller is next
            self._launcher.take_failure()  # this step's error stands for any launch's
            raise

    def settle(self) -> None:
        """Wait until the launch last handed to the launcher thread (a round, or a join's
        prefill queued behind one) is encoded: after it, this thread may evaluate again (the
        launcher evaluates on the stream its ops use). Raises a launch's failure, if one has
        failed (a round, or a launch nobody reads: `launch.evaluate_behind`)."""
        if self._launcher is not None:
            self._launcher.idle()
            self._launcher.raise_failure()

    def _step(self) -> list[RequestOutput]:
        t0 = time.perf_counter()
        events = self._take_new_work()
        stats = RoundStats()
        events += self._drop_finished()  # aborted rows leave before a round computes them
        if (self.rows or self._flight) and self._pipelined():
            events += self._pipelined_step(stats)
        else:
            self.settle()  # a round that evaluates here
            if self._flight is not None:  # a batch that cannot pipeline: drain first
                flight, self._flight = self._flight, None
                events += self._collect(flight, stats)
                events += [e for r in self.rows if (e := r.take_event()) is not None]
                events += self._drop_finished()
            self._admit(stats)
            events += self._drop_finished()
            round_ = self._round(stats) if self.rows else None
            events += [e for r in self.rows if (e := r.take_event()) is not None]
            self._drop_finished()
            if round_ is not None and self.depth_policy is not None:
                proposal, verdict = round_
                step_s = time.perf_counter() - t0 - stats.time_prefill_s
                self.depth_policy.observe(proposal.counts, verdict.num_accepted, step_s)
        if stats.batch_size or stats.num_prefill_tokens:
            self._stats.append(stats)
        return events

    def take_round_stats(self) -> list[RoundStats]:
        stats, self._stats = self._stats, []
        return stats

    def info(self) -> EngineInfo:
        """Capacity and load as the scheduler reads them (workers/engine_info.py)."""
        from workers.engine_info import engine_info

        return engine_info(self)

    def generate(
        self,
        prompts: Sequence[Sequence[int] | str],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[Completion]:
        """Run prompts to completion (workers/generate.py); one SamplingParams or one each."""
        from workers.generate import generate

        return generate(self, prompts, params)

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
            self.drafter.commit(
                verdict.num_accepted, self._verify_hidden, mx.array(verdict.tokens.astype(np.int32))
            )
        t3 = time.perf_counter()
        emit_round(self.rows, proposal.counts, verdict, stats)
        stats.time_draft_s, stats.time_verify_s, stats.time_compact_s = t1 - t0, t2 - t1, t3 - t2
        return proposal, verdict

    # -- pipelined rounds (see the module docstring) --------------------------------------------
    def _pipelined(self) -> bool:
        """Can the next round be built without reading the last one back?"""
        if not self.config.pipeline:
            return False
        rows = self.rows + list(self._prefill.rows if self._prefill else [])
        if not all(r.params.is_greedy and not r.params.penalised for r in rows):
            return False
        if self._device_drafter:
            return True
        # A host-side drafter (draft model, n-grams) needs exact histories, unless the depth
        # policy drafts nothing this round: then the round is plain decoding.
        return self.depth_policy is not None and self.depth_policy.choose(len(self.rows)) == 0

    def _pipelined_step(self, stats: RoundStats) -> list[RequestOutput]:
        """launch N+1 -> collect N (host work overlaps the device) -> leave -> admit."""
        launcher, rows_min = self._launcher, self._launch_rows
        if launcher is not None and rows_min is not None and len(self.rows) < rows_min:
            self.settle()  # launched here: the last launch must be done (and must not have failed)
            launcher = None
        t0 = time.perf_counter()  # after that wait (see launch_s below)
        with _routing(launcher):
            launched = self._launch() if self.rows else None
        t1 = time.perf_counter()
        if launched is not None:
            # Not the waits for the launcher thread to finish the launch before (the hand-off's,
            # or the idle above): what that launch cost beyond the round (a graph switch or
            # build for its shape) would land in this round's cost, and a depth probed or
            # explored among plain rounds read 15 ms a round on the H200 where held it ran
            # 3-5 (bench/results/s35).
            handoff = launched.ticket.handoff_s if launched.ticket is not None else 0.0
            prev_wait = self._flight.wait_s if self._flight else 0.0
            launched.launch_s = t1 - t0 - prev_wait - handoff
        events: list[RequestOutput] = []
        flight, self._flight = self._flight, launched
        # Rows leave and join routed too: what a join evaluates (its prefill) then queues behind
        # the launch, and neither waits for it (Membership.settle_unless_routed).
        with _routing(launcher if self.route_joins else None):
            if flight is not None:
                events += self._collect(flight, stats)
                events += [e for r in self.rows if (e := r.take_event()) is not None]
                t_drop = time.perf_counter()
                events += self._drop_finished()  # finished in N: their N+1 slots are discarded
                if launched is not None:
                    # A leave evaluates the rows it moves (cache_rows.py `keep_in_place`), so it waits
                    # for N+1's forward: that wait is N+1's cost, not N's.
                    drop_s = time.perf_counter() - t_drop
                    launched.launch_s += drop_s
                    t1 += drop_s
            t2 = time.perf_counter()
            if self.rows or self.waiting:
                self._admit(stats)  # joiners prefill now and join round N+2
        if flight is not None and self.depth_policy is not None:
            # Round N's cost: building and launching it (last step) plus waiting for and
            # emitting it (this step). This step's launch belongs to N+1, whose depth may
            # differ: on a backend that computes while launching (the CPU) it is most of N+1.
            counts, accepted = flight.counts, stats.accepted_per_row
            cost = flight.launch_s + flight.wait_s + (t2 - t1)
            self.depth_policy.observe(counts[: len(accepted)], np.asarray(accepted), cost)
        return events

    def _launch(self) -> Flight:
        """Build the next round from device state and start it; reads nothing back."""
        prev = self._flight
        rows = list(self.rows)
        proposal = self._draft(None, in_flight=prev.width if prev else 0)
        if self._wait_before_launch:
            settle_before(prev, proposal.counts)
        last = last_tokens(self.rows, prev)
        window = self._window(last, proposal)  # [B, K+1]
        logits = self._forward(window, np.asarray(proposal.counts, dtype=np.int64) + 1)
        num_accepted, tokens = greedy_outcome(logits, proposal)
        want_logprobs = any(r.params.logprobs for r in rows)
        logprobs = token_logprobs(logits, tokens) if want_logprobs else None
        # A plain round commits exactly one token per row: the host's lengths stay exact.
        self.cache.commit_lazy(num_accepted + 1, window.shape[1], all_most=window.shape[1] == 1)
        if self.drafter is not None and self._device_drafter:
            self.drafter.commit(num_accepted, self._verify_hidden, tokens)
        if window.shape[1] == 1:  # a plain round: its one token is the newest
            new_last = tokens[:, 0]
        else:
            new_last = mx.take_along_axis(tokens, num_accepted[:, None], axis=1)[:, 0]
        flight = Flight(rows, proposal.counts, num_accepted, tokens, new_last, logprobs,
                         window.shape[1])  # fmt: skip
        flight.launch(copies=self._launcher is not None)
        return flight

    def _collect(self, flight: Flight, stats: RoundStats) -> list[RequestOutput]:
        """Read a launched round back (waits for it) and emit its tokens."""
        t0 = time.perf_counter()
        verdict = flight.read_back()
        stats.time_verify_s = time.perf_counter() - t0  # the device time the host waited for
        emit_round(flight.rows, flight.counts, verdict, stats)
        # Tighten the host's length bounds: a live row's cache holds its history but the last
        # token, plus at most one window of the round now in flight.
        inflight = self._flight.width if self._flight is not None else 0
        live = np.array([not r.is_finished for r in self.rows], dtype=bool)
        exact = np.array([len(r.history) - 1 for r in self.rows], dtype=np.int64)
        self.cache.tighten(exact + inflight, live, exact=inflight <= 1)
        tighten = getattr(self.drafter, "tighten", None)
        if tighten is not None:
            tighten(exact, live)
        return []

    def _sampling(self) -> RoundSampling | None:
        return RoundSampling.for_rows(
            [r.params for r in self.rows],
            [r.seed for r in self.rows],
            [r.history for r in self.rows],
            [r.prompt_len for r in self.rows],
            self.vocab_size,
        )

    def _draft(self, sampling: RoundSampling | None = None, in_flight: int = 0) -> Proposal:
        return propose_round(
            self.drafter, self.rows, self.config, self.depth_policy, sampling, in_flight,
            self.pad_verify,
        )  # fmt: skip

    def _verify(self, proposal: Proposal, sampling: RoundSampling | None = None) -> Verdict:
        last = mx.array(np.array([r.history[-1] for r in self.rows], dtype=np.int32))
        window = self._window(last, proposal)  # [B, K+1]
        # Padding after a row's drafts is causally invisible to them, and never committed.
        valid = np.asarray(proposal.counts, dtype=np.int64) + 1
        logits = self._forward(window, valid)  # [B, K+1, V]
        want_logprobs = any(r.params.logprobs for r in self.rows)
        if sampling is not None:
            return sampling.verify(logits, proposal, want_logprobs)
        return verify_greedy(logits, proposal, want_logprobs)

    def _window(self, last: mx.array, proposal: Proposal) -> mx.array:
        """[B, K+1] verify input: each row's newest token, then its drafts (lazy or host)."""
        if proposal.tokens.shape[1] == 0:
            return last[:, None]
        return mx.concatenate([last[:, None], proposal.device_tokens()], axis=1)

    def _forward(self, window: mx.array, valid: np.ndarray) -> mx.array:
        """Target forward over the window: logits [B, K+1, V]; keeps the MTP head's hidden."""
        self._verify_hidden = None
        if not self._needs_hidden:
            return forward_window(self.model, self.cache, window, valid)
        # [B, K+1, H] hidden states (pre- or post-final-norm, as the MTP head reads them): the
        # head drafts the next round from them.
        self._verify_hidden, logits = forward_window_hidden(
            self.model, self.cache, window, valid, self._post_norm
        )
        return logits


def _routing(launcher: Launcher | None) -> contextlib.AbstractContextManager[None]:
    """Launches inside go through `launcher` (workers/launch.py); None: MLX's own calls."""
    return launcher.routing() if launcher is not None else contextlib.nullcontext()
