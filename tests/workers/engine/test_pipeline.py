"""Pipelined rounds (round N+1 launched before round N is read) change no token.

What pipelining can break, each compared with mlx-lm's single-sequence greedy decode (an
independent reference) and with the same engine run one round at a time (pipeline=False):
rows finishing in different rounds (EOS, max_tokens, stop sequences split across windows), an
abort arriving while a round is in flight, requests joining between in-flight rounds, logprobs,
and a batch switching between pipelined and synchronous rounds when a sampled request joins.
Each with one round in flight and with two (EngineConfig.pipeline_depth).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, kv_layers, membership
from workers.drafters.mtp import MTPDrafter

MAX_TOKENS = 24
DEPTH = {"rounds": 1}  # pipeline_depth of the engines engine_for builds (the `depth` fixture)


@pytest.fixture(autouse=True, params=[1, 2], ids=["depth1", "depth2"])
def depth(request):
    """Every test here runs with one round in flight, then two (EngineConfig.pipeline_depth:
    round N+2 built before round N is read)."""
    DEPTH["rounds"] = request.param
    yield request.param
    DEPTH["rounds"] = 1


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def setup(request):
    target = tiny_model(request.param, seed=5, layers=2 if request.param == "qwen3" else 4)
    head = fit_mtp_head(target, steps=60)
    prompts = mixed_prompts(6, seed=17)
    refs = [reference_greedy(target, p, MAX_TOKENS) for p in prompts]
    return target, head, prompts, refs


def engine_for(target, head, drafter: str, pipeline: bool = True, **kw) -> Engine:
    d = MTPDrafter(target, head) if drafter == "mtp" else None
    kw = {"max_batch_size": 8, "pipeline_depth": DEPTH["rounds"], **kw}
    return Engine(target, drafter=d, pipeline=pipeline, draft_depth=3, **kw)


def drain(engine: Engine, abort_at: dict[int, str] | None = None) -> dict[str, list]:
    """Step until idle; returns each request's events. abort_at: {step number: request id}."""
    events: dict[str, list] = {}
    step = 0
    while engine.has_work():
        if abort_at and step in abort_at:
            engine.abort(abort_at[step])
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
        step += 1
    return events


def tokens_of(evs) -> list[int]:
    return [t for e in evs for t in e.new_tokens]


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_pipelined_rounds_run_and_match_the_reference(setup, drafter, depth):
    target, head, prompts, refs = setup
    engine = engine_for(target, head, drafter)
    seen_flight, most_in_flight = False, 0
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=MAX_TOKENS - (i % 4)))
    got: dict[str, list[int]] = {}
    while engine.has_work():
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
        seen_flight |= engine._flight is not None
        most_in_flight = max(most_in_flight, len(engine._flights))
    assert seen_flight, "the greedy batch must have run pipelined rounds"
    assert most_in_flight == depth, "rounds in flight between steps: pipeline_depth"
    for i, ref in enumerate(refs):
        n = MAX_TOKENS - (i % 4)
        assert_matches(got[f"r{i}"], (ref[0][:n], ref[1][:n]), f"{drafter} row {i}")


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_rows_finishing_in_different_rounds(setup, drafter):
    """EOS at different points, tiny max_tokens, and stop sequences that straddle windows."""
    target, head, prompts, refs = setup
    params = []
    for i, (ref, _) in enumerate(refs):
        if i % 3 == 0:  # EOS: the reference's token at position 3 + i ends the row there
            params.append(SamplingParams(max_tokens=MAX_TOKENS, stop_token_ids=[ref[3 + i]]))
        elif i % 3 == 1:  # a two-token stop sequence, somewhere inside the output
            params.append(SamplingParams(max_tokens=MAX_TOKENS, stop=[ref[5 + i : 7 + i]]))
        else:
            params.append(SamplingParams(max_tokens=1 + i))
    outs = {}
    for pipeline in (True, False):
        engine = engine_for(target, head, drafter, pipeline)
        for i, p in enumerate(prompts):
            engine.add_request(f"r{i}", p, params[i])
        outs[pipeline] = drain(engine)
    for i, (ref, _) in enumerate(refs):
        got = tokens_of(outs[True][f"r{i}"])
        assert got == tokens_of(outs[False][f"r{i}"]), f"row {i}: pipelined != synchronous"
        last = outs[True][f"r{i}"][-1]
        assert last.finished
        if i % 3 == 0:
            first = ref.index(ref[3 + i])  # the first occurrence of the stop id ends the row
            assert got == ref[:first] and last.finish_reason == "stop", i
        elif i % 3 == 1:
            seq = ref[5 + i : 7 + i]
            end = next(j for j in range(len(ref)) if ref[j : j + 2] == seq)
            assert got == ref[:end] and last.finish_reason == "stop", i
        else:
            assert got == ref[: 1 + i] and last.finish_reason == "length", i
    assert not engine.rows and engine._flight is None


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_abort_while_a_round_is_in_flight(setup, drafter):
    target, head, prompts, refs = setup
    engine = engine_for(target, head, drafter)
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, sp)
    early = engine.step() + engine.step()  # prefill + first round, then a pipelined launch
    assert engine._flight is not None
    events = drain(engine, abort_at={0: "r2", 2: "r4"})
    for ev in reversed(early):
        events.setdefault(ev.request_id, []).insert(0, ev)
    for i, ref in enumerate(refs):
        evs = events.get(f"r{i}", [])
        if i in (2, 4):
            assert evs and evs[-1].finish_reason == "abort", i
            assert sum(e.finished for e in evs) == 1, "exactly one finished event"
            assert_matches(tokens_of(evs), (ref[0][: len(tokens_of(evs))], ref[1]), f"row {i}")
        else:
            assert_matches(tokens_of(evs), ref, f"{drafter} row {i}")
    assert not engine.rows and not engine._live_ids


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_joins_between_in_flight_rounds(setup, drafter):
    target, head, prompts, refs = setup
    engine = engine_for(target, head, drafter)
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    got: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):  # one new request every step, while rounds are in flight
        engine.add_request(f"r{i}", p, sp)
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
    for ev in [e for _ in iter(engine.has_work, False) for e in engine.step()]:
        got.setdefault(ev.request_id, []).extend(ev.new_tokens)
    for i, ref in enumerate(refs):
        assert_matches(got[f"r{i}"], ref, f"{drafter} joiner {i}")


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_logprobs_match_the_synchronous_engine(setup, drafter):
    target, head, prompts, refs = setup
    sp = SamplingParams(max_tokens=12, logprobs=True)
    outs = {
        pipeline: engine_for(target, head, drafter, pipeline).generate(prompts, sp)
        for pipeline in (True, False)
    }
    for a, b, p in zip(outs[True], outs[False], prompts):
        assert a.tokens == b.tokens
        assert a.logprobs is not None and b.logprobs is not None
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
        # Independent check: the target's own log-softmax at each emitted token.
        logits = target(mx.array([p + a.tokens]))[0].astype(mx.float32)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        want = [float(logp[len(p) - 1 + j, t]) for j, t in enumerate(a.tokens)]
        np.testing.assert_allclose(a.logprobs, want, atol=1e-3)


def test_a_sampled_joiner_switches_the_batch_to_synchronous_rounds(setup):
    """Greedy rows keep their tokens when a seeded sampled row joins mid-run (the engine
    drains the round in flight and runs one round at a time while the sampled row lives)."""
    target, head, prompts, refs = setup
    engine = engine_for(target, head, "mtp")
    greedy = SamplingParams(max_tokens=MAX_TOKENS)
    sampled = SamplingParams(max_tokens=8, temperature=0.8, seed=3, acceptance="coupled")
    for i in range(4):
        engine.add_request(f"g{i}", prompts[i], greedy)
    got: dict[str, list[int]] = {}
    for step in range(40):
        if step == 3:
            engine.add_request("s", prompts[5], sampled)
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
        if not engine.has_work():
            break
    for i in range(4):
        assert_matches(got[f"g{i}"], refs[i], f"greedy row {i}")
    alone = Engine(target).generate([prompts[5]], sampled)[0].tokens
    assert got["s"] == alone


def test_a_lone_row_switching_between_drafting_and_plain_rounds(setup):
    """One row whose depth cap changes round by round (2, 0, 0, 3, 0, 1, 0, 0, ...): a plain
    round right after a drafting one still has the drafting round in flight, so the host's
    length is an upper bound and attention must stay masked; plain rounds after that read the
    row's exact slots unmasked (BatchCache.reads_exact_row). Tokens equal mlx-lm's."""
    from workers.depth_policy import DepthPolicy

    target, head, prompts, refs = setup
    schedule = [2, 0, 0, 3, 0, 1, 0, 0, 0, 2]

    class Scheduled(DepthPolicy):
        def choose(self, batch_size: int) -> int:
            return schedule[self._rounds % len(schedule)]

    unmasked = []
    for p, ref in zip(prompts[:3], refs[:3]):
        engine = engine_for(target, head, "mtp", adaptive_depth=True)
        engine.depth_policy = Scheduled(3)
        real = engine.cache.window_end

        def spy(W: int, cache=engine.cache, real=real) -> int:
            unmasked.append(cache.reads_exact_row(W))
            return real(W)

        engine.cache.window_end = spy  # type: ignore[method-assign]
        engine.add_request("r", p, SamplingParams(max_tokens=MAX_TOKENS))
        assert_matches(tokens_of(drain(engine)["r"]), ref, "depth switching at B=1")
    assert any(unmasked) and not all(unmasked), "both kinds of step ran"


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_rows_leaving_and_joining_in_place_match_the_reference(setup, drafter, monkeypatch):
    """More requests than rows, each with its own max_tokens: rows leave in different rounds,
    the batch's last rows fill their places and queued requests join into spare rows
    (workers/cache_rows.py, in place), every output is mlx-lm's single-sequence decode, and
    the drafter, reordered with the rows, drafts as well as when every row keeps its order."""
    target, head, prompts, refs = setup
    seen = {"moves": 0, "joins_in_place": 0}
    place_rows, append = kv_layers.RaggedKVCache.place_rows, kv_layers.append_parts

    def counted_place_rows(layer, dest, moved, rows, max_len):
        seen["moves"] += bool(dest)
        place_rows(layer, dest, moved, rows, max_len)

    def counted_append(mine, theirs, num_self, num_other, capacity=0):
        if capacity and mine and theirs and mine[0].shape[0] >= num_self + num_other:
            seen["joins_in_place"] += 1
        return append(mine, theirs, num_self, num_other, capacity)

    monkeypatch.setattr(kv_layers.RaggedKVCache, "place_rows", counted_place_rows)
    monkeypatch.setattr(kv_layers, "append_parts", counted_append)
    lengths = [MAX_TOKENS - 7 * (i % 3) for i in range(len(prompts))]  # 24, 17, 10, ...

    def run() -> tuple[dict[str, list[int]], int]:
        engine = engine_for(target, head, drafter, max_batch_size=3)
        assert engine.cache.row_capacity == 3
        for i, p in enumerate(prompts):
            engine.add_request(f"r{i}", p, SamplingParams(max_tokens=lengths[i]))
        got: dict[str, list[int]] = {}
        while engine.has_work():
            for ev in engine.step():
                got.setdefault(ev.request_id, []).extend(ev.new_tokens)
        return got, sum(s.num_accepted_tokens for s in engine.take_round_stats())

    got, accepted = run()
    assert seen["moves"] and seen["joins_in_place"], seen
    for i, ref in enumerate(refs):
        n = lengths[i]
        assert_matches(got[f"r{i}"], (ref[0][:n], ref[1][:n]), f"{drafter} row {i}")
    if drafter is not None:  # the same requests with every row kept in order (gathered)
        monkeypatch.setattr(membership, "fill_holes", lambda keep, n: list(keep))
        _, in_order = run()
        # Equal here (19 and 7 drafts accepted); one near-tie flip of a draft is allowed. With
        # the drafter left in the old order the dense target's run accepted 16 against 19.
        assert accepted > 0 and abs(accepted - in_order) <= max(1, 0.05 * in_order)


def test_the_worker_flag_reaches_the_engine_config():
    import argparse

    from workers.service.engine_spec import EngineSpec, add_engine_args

    p = argparse.ArgumentParser()
    add_engine_args(p)
    assert EngineSpec.from_args(p.parse_args(["--pipeline-depth", "2"])).config.pipeline_depth == 2
    assert EngineSpec.from_args(p.parse_args([])).config.pipeline_depth == 1
    with pytest.raises(SystemExit):  # argparse names the choices
        p.parse_args(["--pipeline-depth", "3"])
    with pytest.raises(ValueError, match="pipeline_depth=3"):
        Engine(tiny_model("qwen3", seed=1), pipeline_depth=3)
