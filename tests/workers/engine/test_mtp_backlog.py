"""MTP pairs from rounds that drafted nothing wait in a backlog and enter the head as one window.

A head the depth policy switched off must not cost a head step every round, and when drafting
resumes the packed window must leave the head exactly where absorbing round by round would have
(same drafts), with outputs still equal to mlx-lm's plain decode.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.depth_policy import DepthPolicy
from workers.drafters.mtp import MTPDrafter


class Every(DepthPolicy):
    """Drafts at full depth every `period`-th round only; depth 0 otherwise."""

    period = 4
    calls = 0

    def choose(self, batch_size: int) -> int:
        return self.max_depth if self._rounds % self.period == self.period - 1 else 0


@pytest.fixture(scope="module")
def setup():
    target = tiny_model("qwen3", seed=3, layers=2)
    return target, fit_mtp_head(target, steps=60)


def test_packed_backlog_drafts_what_round_by_round_absorbing_drafts(setup):
    target, head = setup
    prompts = mixed_prompts(4, seed=2)
    drafts = {}
    for max_backlog in (1, 8):  # 1: absorb at every commit (the old behaviour)
        engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=4, draft_depth=3)
        engine.drafter.max_backlog = max_backlog  # type: ignore[union-attr]
        engine.depth_policy = Every(max_depth=3)
        engine.config.adaptive_depth = True
        proposals = []
        orig = engine.drafter.propose  # type: ignore[union-attr]

        def spy(request, orig=orig, proposals=proposals):
            p = orig(request)
            proposals.append(np.array(p.device_tokens()))
            return p

        engine.drafter.propose = spy  # type: ignore[union-attr,method-assign]
        outs = engine.generate(prompts, SamplingParams(max_tokens=24))
        for p, o in zip(prompts, outs):
            assert_matches(o.tokens, reference_greedy(target, p, 24), f"backlog {max_backlog}")
        drafts[max_backlog] = proposals
    assert len(drafts[1]) == len(drafts[8]) >= 3
    same = sum(np.array_equal(a, b) for a, b in zip(drafts[1], drafts[8]))
    assert same == len(drafts[1]), f"{same}/{len(drafts[1])} proposals identical"


def test_depth_zero_rounds_run_no_head_step(setup):
    target, head = setup
    drafter = MTPDrafter(target, head)
    steps = {"n": 0}
    orig = drafter._step

    def counting(*a, **k):
        steps["n"] += 1
        return orig(*a, **k)

    drafter._step = counting  # type: ignore[method-assign]
    engine = Engine(target, drafter=drafter, max_batch_size=2, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = Every(max_depth=3)
    engine.depth_policy.period = 1000  # never drafts
    prompts = mixed_prompts(2, seed=4)
    outs = engine.generate(prompts, SamplingParams(max_tokens=40))
    prefill_steps = steps["n"]
    rounds = len([s for s in engine.take_round_stats() if s.batch_size])
    # Only the prompts' prefill and one packed absorb per max_backlog verifies ran the head.
    assert prefill_steps <= 2 + rounds // drafter.max_backlog + 1, (prefill_steps, rounds)
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 40), "depth 0")
    mx.eval(drafter.cache.state_arrays())
