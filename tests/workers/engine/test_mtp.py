"""MTP-head drafting: greedy B=1 == B=6 mixed lengths == no drafter == mlx-lm's plain decode."""

from __future__ import annotations

import mlx.core as mx
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.drafters.mtp import MTPDrafter

MAX_TOKENS = 20


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def setup(request):
    target = tiny_model(request.param, seed=3, layers=2 if request.param == "qwen3" else 4)
    head = fit_mtp_head(target, steps=60)
    prompts = mixed_prompts(6, seed=11)
    refs = [reference_greedy(target, p, MAX_TOKENS) for p in prompts]
    return target, head, prompts, refs


@pytest.mark.parametrize("depth", [1, 3, 5])
def test_mtp_parity_with_mixed_accepts(setup, depth):
    target, head, prompts, refs = setup
    for bs in (1, 6):
        engine = Engine(
            target, drafter=MTPDrafter(target, head), max_batch_size=bs, draft_depth=depth
        )
        outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        for i, (o, ref) in enumerate(zip(outs, refs)):
            assert_matches(o.tokens, ref, f"mtp B={bs} depth={depth} row {i}")
        stats = engine.take_round_stats()
        accepted = sum(s.num_accepted_tokens for s in stats)
        assert 0 < accepted < sum(s.num_draft_tokens for s in stats)
        if bs > 1:
            assert sum(len(set(s.accepted_per_row)) > 1 for s in stats) >= 2


def test_mtp_teacher_forced_gap_is_zero(setup):
    target, head, prompts, _ = setup
    engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=6, draft_depth=4)
    for prompt, out in zip(
        prompts, engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    ):
        logits = target(mx.array([prompt + out.tokens]))[0]
        for j, tok in enumerate(out.tokens):
            row = logits[len(prompt) - 1 + j]
            assert float((row.max() - row[tok]).item()) <= 1e-4, j


def test_joining_request_matches_alone_with_mtp(setup):
    target, head, prompts, refs = setup
    engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=8, draft_depth=3)
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    for i in range(3):
        engine.add_request(f"r{i}", prompts[i], sp)
    got: dict[str, list[int]] = {}
    for _ in range(2):
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
    for i in range(3, 6):
        engine.add_request(f"r{i}", prompts[i], sp)
    while engine.has_work():
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
    for i in range(6):
        assert_matches(got[f"r{i}"], refs[i], f"joined row {i}")
