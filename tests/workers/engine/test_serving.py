"""Continuous batching, aborts, depth clamps, stops and bad input through the real engine."""

from __future__ import annotations

import pytest

from tests.tiny import mixed_prompts, perturbed, reference_greedy, tiny_model
from workers import Engine, ModelDrafter, SamplingParams


@pytest.fixture(scope="module")
def models():
    target = tiny_model("llama", seed=7)
    return target, perturbed(target, scale=0.3, seed=2)


def drain(engine: Engine, until_done: set[str] | None = None) -> dict[str, list]:
    events: dict[str, list] = {}
    while engine.has_work():
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
    return events


def tokens_of(evs) -> list[int]:
    return [t for e in evs for t in e.new_tokens]


def test_request_joining_a_running_batch_matches_running_alone(models):
    target, draft = models
    engine = Engine(target, drafter=ModelDrafter(draft), max_batch_size=8, draft_depth=4)
    prompts = mixed_prompts(4, seed=21)
    sp = SamplingParams(max_tokens=24)
    for i, p in enumerate(prompts[:3]):
        engine.add_request(f"r{i}", p, sp)
    early: dict[str, list] = {}
    for _ in range(3):  # the first three are mid-generation when r3 joins
        for ev in engine.step():
            early.setdefault(ev.request_id, []).append(ev)
    assert any(tokens_of(v) for v in early.values())
    engine.add_request("r3", prompts[3], sp)
    late = drain(engine)
    for i, p in enumerate(prompts):
        got = tokens_of(early.get(f"r{i}", []) + late.get(f"r{i}", []))
        assert got == reference_greedy(target, p, 24)[0], f"r{i}"


def test_abort_leaves_other_rows_unchanged(models):
    target, draft = models
    prompts = mixed_prompts(4, seed=5)
    sp = SamplingParams(max_tokens=20)
    alone = Engine(target, drafter=ModelDrafter(draft), max_batch_size=8).generate(prompts, sp)
    engine = Engine(target, drafter=ModelDrafter(draft), max_batch_size=8)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, sp)
    events: dict[str, list] = {}
    for _ in range(2):
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
    engine.abort("r1")
    for rid, evs in drain(engine).items():
        events.setdefault(rid, []).extend(evs)
    assert events["r1"][-1].finish_reason == "abort"
    aborted = tokens_of(events["r1"])
    assert aborted == alone[1].tokens[: len(aborted)] and len(aborted) < len(alone[1].tokens)
    assert engine.info().num_running == 0
    for i in (0, 2, 3):
        assert tokens_of(events[f"r{i}"]) == alone[i].tokens


def test_depth_beyond_budget_and_capacity_is_clamped(models):
    target, draft = models
    prompts = mixed_prompts(4, seed=8)
    base = Engine(target, drafter=ModelDrafter(draft), draft_depth=1, max_batch_size=4)
    expected = base.generate(prompts, SamplingParams(max_tokens=3))
    deep = Engine(target, drafter=ModelDrafter(draft), draft_depth=16, max_batch_size=4)
    assert [
        c.tokens for c in deep.generate(prompts, SamplingParams(max_tokens=3, draft_depth=16))
    ] == [c.tokens for c in expected]
    # A verify path that fits 2 tokens per row (4 rows x 2) forces depth 1 for everyone.
    tight = Engine(
        target, drafter=ModelDrafter(draft), draft_depth=16, max_batch_size=4, max_verify_tokens=8
    )
    got = tight.generate(prompts, SamplingParams(max_tokens=12))
    ref = base.generate(prompts, SamplingParams(max_tokens=12))
    assert [c.tokens for c in got] == [c.tokens for c in ref]
    assert max(s.accepted_per_pos.__len__() for s in tight.take_round_stats()) <= 1
    # Near the context limit rows draft less instead of overflowing.
    small_ctx = Engine(target, drafter=ModelDrafter(draft), draft_depth=8, max_context=40)
    outs = small_ctx.generate(prompts, SamplingParams(max_tokens=100))
    for p, c in zip(prompts, outs):
        assert len(p) + len(c.tokens) == 40 and c.finish_reason == "length"


def test_stops_never_emit_tokens_past_the_stop(models):
    target, draft = models
    prompt = mixed_prompts(1, seed=3, lengths=[6])[0]
    ref = reference_greedy(target, prompt, 30)[0]
    engine = Engine(target, drafter=ModelDrafter(draft), draft_depth=6)

    stop_tok = ref[9]
    first = ref.index(stop_tok)
    out = engine.generate([prompt], SamplingParams(max_tokens=30, stop_token_ids=(stop_tok,)))[0]
    assert out.tokens == ref[:first] and out.finish_reason == "stop"

    seq = tuple(ref[12:14])
    at = next(i for i in range(len(ref) - 1) if tuple(ref[i : i + 2]) == seq)
    engine.add_request("s", prompt, SamplingParams(max_tokens=30, stop=(seq,)))
    evs = drain(engine)["s"]
    assert tokens_of(evs) == ref[:at] and evs[-1].finish_reason == "stop"

    out = engine.generate([prompt], SamplingParams(max_tokens=7))[0]
    assert out.tokens == ref[:7] and out.finish_reason == "length"


def test_eos_from_tokenizer_stops_and_text_prompts_work(models, tiny_tokenizer):
    target, _ = models
    engine = Engine(target, tiny_tokenizer, max_context=256)
    prompt = "def add(a, b):"
    ref = reference_greedy(target, tiny_tokenizer.encode(prompt, add_special_tokens=False), 30)[0]
    out = engine.generate([prompt], SamplingParams(max_tokens=30))[0]
    eos = next(iter(tiny_tokenizer.eos_token_ids))
    expect = ref[: ref.index(eos)] if eos in ref else ref
    assert out.tokens == expect
    assert out.text == tiny_tokenizer.decode(expect)
    ignore = engine.generate([prompt], SamplingParams(max_tokens=30, ignore_eos=True))[0]
    assert ignore.tokens == ref


@pytest.mark.parametrize(
    "prompt,params,needle",
    [
        ([], {}, "prompt=[]"),
        ([1, 2, 999], {}, "999"),
        ([1, -3], {}, "-3"),
        (list(range(64)), {}, "prompt length 64"),
    ],
)
def test_bad_requests_are_rejected_and_the_engine_keeps_serving(models, prompt, params, needle):
    target, draft = models
    engine = Engine(target, drafter=ModelDrafter(draft), max_context=64)
    engine.add_request("ok", [1, 2, 3], SamplingParams(max_tokens=5))
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        engine.add_request("bad", prompt, SamplingParams(**params))
    events = drain(engine)
    assert tokens_of(events["ok"]) == reference_greedy(target, [1, 2, 3], 5)[0]


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"max_tokens": -5}, "max_tokens=-5"),
        ({"draft_depth": 0}, "draft_depth=0"),
        ({"draft_depth": 17}, "draft_depth=17"),
        ({"temperature": -1.0}, "temperature=-1.0"),
    ],
)
def test_bad_sampling_params_name_the_value(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        SamplingParams(**kwargs)


def test_bad_engine_config_names_the_value(models):
    target, _ = models
    for kw, needle in [
        ({"draft_depth": 0}, "draft_depth=0"),
        ({"draft_depth": 17}, "draft_depth=17"),
    ]:
        with pytest.raises(ValueError, match=needle):
            Engine(target, **kw)
    engine = Engine(target)
    engine.add_request("x", [1], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="already running"):
        engine.add_request("x", [1], SamplingParams(max_tokens=2))


def test_long_prompt_prefills_in_chunks_while_others_keep_decoding(models):
    target, draft = models
    engine = Engine(
        target, drafter=ModelDrafter(draft), max_batch_size=8, prefill_step_size=8, max_context=256
    )
    short = mixed_prompts(2, seed=9)
    long_prompt = mixed_prompts(1, seed=10, lengths=[60])[0]
    sp = SamplingParams(max_tokens=30)
    for i, p in enumerate(short):
        engine.add_request(f"s{i}", p, sp)
    got: dict[str, list[int]] = {}

    def step() -> set[str]:
        emitted = set()
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
            if ev.new_tokens:
                emitted.add(ev.request_id)
        return emitted

    step()
    engine.add_request("long", long_prompt, sp)
    # 59 prompt tokens in chunks of 8: the running rows keep emitting during >= 7 steps.
    steps_while_prefilling = 0
    while "long" not in got:
        emitted = step()
        steps_while_prefilling += bool(emitted & {"s0", "s1"}) and "long" not in got
    assert steps_while_prefilling >= 6
    while engine.has_work():
        step()
    for rid, p in [("s0", short[0]), ("s1", short[1]), ("long", long_prompt)]:
        assert got[rid] == reference_greedy(target, p, 30)[0], rid


def test_abort_during_chunked_prefill_ends_the_request(models):
    target, _ = models
    engine = Engine(target, max_batch_size=8, prefill_step_size=4, max_context=256)
    engine.add_request("run", [1, 2, 3], SamplingParams(max_tokens=40))
    engine.step()
    engine.add_request(
        "long", mixed_prompts(1, seed=3, lengths=[40])[0], SamplingParams(max_tokens=5)
    )
    engine.step()
    assert engine.info().num_waiting == 1  # still prefilling
    engine.abort("long")
    events = drain(engine)
    assert events["long"][-1].finish_reason == "abort" and tokens_of(events["long"]) == []
    assert events["run"][-1].finish_reason == "length"
