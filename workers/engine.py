"""The worker engine: continuous batching with lossless batched speculative decoding.

    step() = take new work  ->  admit (prefill joiners)  ->  one speculative round

and the round is draft -> verify -> accept -> compact -> emit (see `_round`). Rows keep their
own accept counts; caches keep every row contiguous (workers.kv_cache). This module imports
neither grpc nor ray: the service (workers/service) and the cluster drive it through
add_request / abort / step / info.

Pipelined rounds (workers/pipelined_rounds.py, workers/pipeline.py): while every row is greedy
and the drafter keeps its state on the device, a step launches round N+1 before it collects
round N. Other batches (sampling, penalties, host-side drafters that are drafting) run one
synchronous round per step; greedy tokens are the same either way.
"""

from __future__ import annotations

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
from workers.join_gate import JoinGate
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant, token_budget
from workers.language_model import LanguageModel
from workers.launch import Launcher
from workers.loading import embedding_rows, make_drafter, upcast_on_cpu
from workers.pipeline import Flight
from workers.pipelined_rounds import PipelinedRounds
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
from workers.verify import Verdict, verify_greedy
from workers.warm_up import warm_up


class Engine(PipelinedRounds):
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
        self._flights: list[Flight] = []  # pipelined rounds launched, not read yet, oldest first
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
        self.join_gate = JoinGate(max_wait_steps=self.config.join_wait_steps)
        self._joins_started = 0  # prefills begun in the step running (the gate's join count)
        if self.config.warm_up:
            warm_up(self)
            # Its joins were of synthetic batches, most beside no running rows: prices come
            # from traffic.
            self.join_gate = JoinGate(max_wait_steps=self.config.join_wait_steps)

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
            return bool(self.rows or self.waiting or self._inbox or self._prefill or self._flights)

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
        if (self.rows or self._flights) and self._pipelined():
            events += self._pipelined_step(stats)
        else:
            self.settle()  # a round that evaluates here
            while self._flights:  # a batch that cannot pipeline: drain first
                events += self._collect(self._flights.pop(0), stats)
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
        started, self._joins_started = self._joins_started, 0
        # Fed only while it may hold (off by default): an idle step tells it nothing either.
        if self.join_gate.max_wait_steps and (stats.batch_size or stats.time_prefill_s > 0):
            self.join_gate.observe_step(
                time.perf_counter() - t0, stats.time_prefill_s > 0, stats.num_prefill_tokens,
                started,
            )  # fmt: skip
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
