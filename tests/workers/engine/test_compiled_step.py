"""MTP head steps as compiled graphs (workers/compiled_step.py), run on the CPU.

The compiled step is the default on MLX CUDA; here it is forced on (it rounds the head cache's
spans itself, so traces are reused across rounds; most tests set a finer span of their own)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_map

from tests.tiny import fit_mtp_head, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, compiled_step
from workers.compiled_step import COMPILE_ENV, CompiledStep
from workers.config import DEFAULT_MODEL_DIR
from workers.drafters.mtp import MTPDrafter
from workers.drafters.mtp_host import ENV as HOST_MTP_ENV

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def default_prompts():
    """The embedded default model (a trained MTP head: drafts are often right) on held-out
    prompts, with mlx-lm's own greedy decode of each as the reference."""
    engine = Engine.load()
    rows = (DEFAULT_MODEL_DIR / "heldout_prompts.jsonl").read_text().splitlines()
    # More prompts than rows (joins into a running batch), of different lengths.
    prompts = [engine.tokenizer.encode(json.loads(r)["body"]["prompt"])[: 20 + 9 * i]
               for i, r in enumerate(rows[:6])]  # fmt: skip
    refs = [reference_greedy(engine.model, p, MAX_TOKENS) for p in prompts]
    return prompts, refs


def run(prompts, compiled: bool, monkeypatch, noise: float = 0.0) -> tuple[list, list, MTPDrafter]:
    monkeypatch.setenv(COMPILE_ENV, "1" if compiled else "0")
    monkeypatch.setenv(HOST_MTP_ENV, "0")  # the ops path is MLX's (not the host's NumPy steps)
    engine = Engine.load(drafter="mtp", max_batch_size=4, draft_depth=3)
    drafter = engine.drafter
    assert isinstance(drafter, MTPDrafter)
    if noise:  # another head of the same shapes: the traces must not carry the first's weights
        rng = np.random.default_rng(0)
        drafter.head.update(tree_map(
            lambda a: a + mx.array(noise * rng.standard_normal(a.shape), a.dtype), drafter.head.parameters()
        ))  # fmt: skip
        mx.eval(drafter.head.parameters())  # new weights are arrays like any input: not lazy
        if compiled:
            drafter.compile_steps()  # weights are read when a CompiledStep is made
    drafter.cache.span = 16  # finer than kv_cache.SPAN: spans change every 16 slots
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    accepted = [s.accepted_per_row for s in engine.take_round_stats()]
    return [o.tokens for o in outs], accepted, drafter


def counting_steps(monkeypatch) -> list[int]:
    """The width of every compiled step called from now on."""
    steps: list[int] = []
    real_call = CompiledStep.__call__

    def counted(self, cache, width, *inputs):
        steps.append(width)
        return real_call(self, cache, width, *inputs)

    monkeypatch.setattr(CompiledStep, "__call__", counted)
    return steps


def test_compiled_head_steps_draft_what_the_ops_path_drafts(default_prompts, monkeypatch):
    prompts, refs = default_prompts
    steps = counting_steps(monkeypatch)
    tokens, accepted, drafter = run(prompts, True, monkeypatch)
    assert drafter.compiled is not None and steps, "the compiled path must have run"
    # Lossless against mlx-lm's own decode, rows joining and leaving between rounds.
    for i, (t, ref) in enumerate(zip(tokens, refs)):
        assert_matches(t, ref, f"compiled head steps, row {i}")
    # The same drafts as the ops path: every round accepts the same counts per row.
    ops_tokens, ops_accepted, ops_drafter = run(prompts, False, monkeypatch)
    assert ops_drafter.compiled is None
    assert ops_tokens == tokens
    assert ops_accepted == accepted
    drafted = sum(len(a) for a in accepted)
    assert sum(sum(a) for a in accepted) > drafted / 2, "the head must draft right often"
    # Traces are reused: a new one only for a new shape or span, not for every step.
    traces = ours(drafter)
    assert 0 < traces < len(steps) / 3, (traces, len(steps))


def ours(drafter: MTPDrafter) -> int:
    return sum(k[0] == drafter.compiled.signature for k in compiled_step._TRACES)


def test_a_second_engine_reuses_the_traces_with_its_own_weights(default_prompts, monkeypatch):
    """Traces take the weights as inputs: a fresh engine of the same model traces nothing new;
    one whose head has other weights of the same shapes reuses the traces and drafts what its
    own ops path drafts (its rows progress differently, so it may meet a few new shapes)."""
    prompts, refs = default_prompts
    _, first_accepted, first = run(prompts, True, monkeypatch)
    before = ours(first)
    _, again, _ = run(prompts, True, monkeypatch)
    assert again == first_accepted and ours(first) == before, "a fresh engine traced again"
    tokens, accepted, second = run(prompts, True, monkeypatch, noise=0.05)
    assert second.compiled.signature == first.compiled.signature
    assert ours(second) - before < before / 2, "the other head must reuse most traces"
    for i, (t, ref) in enumerate(zip(tokens, refs)):
        assert_matches(t, ref, f"second engine, row {i}")
    _, ops_accepted, _ = run(prompts, False, monkeypatch, noise=0.05)
    assert accepted == ops_accepted
    assert accepted != first_accepted, "the other weights must change what the head drafts"


def test_compile_env_off_keeps_ops_even_where_compiling_is_the_default(monkeypatch):
    from workers import drafting
    from workers.backend import Backend
    from workers.config import EngineConfig

    model = tiny_model("qwen3_5", seed=3, layers=4)
    cuda_like = Backend(builds_per_shape=True, computes_in_launch=False)
    for env, want in (("0", False), ("1", True), (None, True)):
        if env is None:
            monkeypatch.delenv(COMPILE_ENV, raising=False)
        else:
            monkeypatch.setenv(COMPILE_ENV, env)
        drafter = MTPDrafter(model, fit_mtp_head(model, steps=1))
        drafting.attach_drafter(drafter, model, EngineConfig(adaptive_depth=False), cuda_like)
        assert (drafter.compiled is not None) == want, env


def test_the_trace_table_keeps_no_engine_alive(default_prompts, monkeypatch):
    """The process-wide traces hold no reference to the engine that traced them (its model,
    its KV cache): once the engine is dropped, its memory goes."""
    import gc
    import weakref

    prompts, _ = default_prompts
    monkeypatch.setattr(compiled_step, "_TRACES", {})  # this engine traces every shape
    monkeypatch.setenv(COMPILE_ENV, "1")
    engine = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=3)
    engine.generate(prompts[:2], SamplingParams(max_tokens=8))
    assert compiled_step._TRACES, "the engine must have traced"
    gone = [weakref.ref(engine.drafter.cache), weakref.ref(engine.model)]
    del engine
    gc.collect()
    assert all(ref() is None for ref in gone)


def test_a_head_with_routed_linears_gets_traces_of_its_own(monkeypatch):
    """The trace key names the modules' classes: a head whose linears run as per-row gemvs
    (workers/row_linear.py, MLX CUDA's default) never replays a trace made without them."""
    from workers import row_linear

    monkeypatch.setenv(COMPILE_ENV, "1")
    signatures = {}
    for route in ("0", "1"):
        monkeypatch.setenv(row_linear.ENV, route)
        engine = Engine.load(drafter="mtp", max_batch_size=2, draft_depth=3)
        assert isinstance(engine.drafter, MTPDrafter) and engine.drafter.compiled is not None
        routed = any(
            type(m) is row_linear.RowLinear for _, m in engine.drafter.head.named_modules()
        )
        assert routed == (route == "1")
        signatures[route] = engine.drafter.compiled.signature
    assert signatures["0"] != signatures["1"]


def test_routed_head_steps_get_their_weight_views_as_inputs(default_prompts, monkeypatch):
    """With the per-row gemv route (MLX CUDA's default) the compiled head step takes each routed
    weight's view as an input instead of tracing the view ops: the same tokens and accepts as
    the ops path, and fewer primitives behind each proposal than a trace that makes its views."""
    from bench.graph_ops import ProposalCounter
    from workers import row_linear

    prompts, refs = default_prompts
    monkeypatch.setenv(row_linear.ENV, "1")
    ops_tokens, ops_accepted, _ = run(prompts, False, monkeypatch)
    counts = {}
    for lend in (True, False):
        compiled_step._TRACES.clear()  # each variant traces afresh
        if not lend:
            monkeypatch.setattr(  # lend nothing: the trace makes its own views
                row_linear.RowLinear, "lend_view", lambda self, view: self.__dict__.get("_view")
            )
        monkeypatch.setenv(COMPILE_ENV, "1")
        engine = Engine.load(drafter="mtp", max_batch_size=4, draft_depth=3)
        drafter = engine.drafter
        assert isinstance(drafter, MTPDrafter) and drafter.compiled is not None
        assert drafter.compiled._viewed, "the head's routed linears must be found"
        drafter.cache.span = 16
        with ProposalCounter(drafter) as d:
            outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        accepted = [s.accepted_per_row for s in engine.take_round_stats()]
        assert [o.tokens for o in outs] == ops_tokens and accepted == ops_accepted
        counts[lend] = d.by_name["Transpose"] + d.by_name["ExpandDims"]
    compiled_step._TRACES.clear()
    assert counts[True] < counts[False], counts


def test_compiling_rounds_the_head_spans_so_a_trace_serves_many_steps(default_prompts, monkeypatch):
    """Forced on where spans are exact (this CPU), compiled steps round the head cache's spans
    themselves: otherwise every step's span is a new trace. Also for a lone sampled row (40
    steps in 2 traces here)."""
    prompts, refs = default_prompts
    monkeypatch.setenv(COMPILE_ENV, "1")
    monkeypatch.setattr(compiled_step, "_TRACES", {})
    steps = counting_steps(monkeypatch)
    engine = Engine.load(drafter="mtp", max_batch_size=4, draft_depth=3)
    assert isinstance(engine.drafter, MTPDrafter) and engine.drafter.compiled is not None
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    for i, (o, ref) in enumerate(zip(outs, refs)):
        assert_matches(o.tokens, ref, f"row {i}")
    traces = ours(engine.drafter)
    assert steps and 0 < traces < len(steps) / 3, (traces, len(steps))
    monkeypatch.setattr(compiled_step, "_TRACES", {})
    steps.clear()
    engine.generate([prompts[-1]], [SamplingParams(max_tokens=40, temperature=0.8, seed=1)])
    traces = ours(engine.drafter)
    assert steps and 0 < traces < len(steps) / 3, ("sampled lone row", traces, len(steps))
