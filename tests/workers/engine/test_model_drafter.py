"""The draft-model drafter feeds its cache exactly the rows' histories.

A drafter that mis-feeds its cache still decodes correctly (the target verifies every draft), so
parity cannot catch it; what catches it is a draft model that *is* the target: then its greedy
drafts are the target's own continuation, and every one of them must be accepted. Any token
fed twice, skipped or misplaced (joins, rounds that draft nothing and pipeline as plain rounds,
tails caught up in prefill chunks) makes drafts wrong, and acceptance falls well below 1 (a
device-resident version of this drafter read 0.73-0.79 with such mistakes planted). With drafts
partly accepted, the host's lengths must stay the cache's own.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny import mixed_prompts, perturbed, reference_greedy, tiny_model
from workers import Engine, ModelDrafter, SamplingParams
from workers.depth_policy import DepthPolicy

MAX_TOKENS = 14


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen3", seed=7)


def acceptance(engine: Engine) -> float:
    stats = engine.take_round_stats()
    drafted = sum(s.num_draft_tokens for s in stats)
    assert drafted > 0, "no round drafted"
    return sum(s.num_accepted_tokens for s in stats) / drafted


class Schedule(DepthPolicy):
    """A depth policy stand-in: depth 0 for two rounds out of every `period` (plain rounds
    whose tokens the drafter must catch up on), the engine's depth otherwise."""

    def __init__(self, depth: int, period: int = 5) -> None:
        super().__init__(max_depth=depth)
        self.depth, self.period, self.calls = depth, period, 0

    def choose(self, batch_size: int) -> int:
        self.calls += 1
        return 0 if self.calls % self.period in (1, 2) else self.depth

    def settled_plain(self, batch_size: int) -> bool:
        return False


@pytest.mark.parametrize("pipeline", [True, False])
@pytest.mark.parametrize("gaps", [False, True])
def test_a_draft_model_equal_to_the_target_has_every_draft_accepted(target, pipeline, gaps):
    prompts = mixed_prompts(7, seed=5, lengths=[3, 17, 9, 40, 2, 26, 12])
    # A prefill step of 4: a prompt, and a stretch of plain rounds, reach the draft cache in
    # prefill chunks before the window.
    drafter = ModelDrafter(target, prefill_step_size=4 if gaps else 512)
    engine = Engine(target, drafter=drafter, max_batch_size=3, draft_depth=3, pipeline=pipeline)
    if gaps:
        engine.depth_policy = Schedule(3)  # type: ignore[assignment]
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    assert acceptance(engine) > 0.97
    for prompt, out in zip(prompts, outs):  # and the tokens are the target's (mlx-lm)
        ref, gap = reference_greedy(target, prompt, MAX_TOKENS)
        flip = next((i for i, (a, b) in enumerate(zip(out.tokens, ref)) if a != b), None)
        assert flip is None or gap[flip] < 1e-4, (prompt, out.tokens, ref)


class Checked(ModelDrafter):
    """Checks after every commit that the host's lengths are the cache's own."""

    checked = 0

    def commit(self, num_accepted, hidden=None, tokens=None):  # type: ignore[no-untyped-def]
        super().commit(num_accepted, hidden, tokens)
        device = np.array(self.cache.lengths_mx)
        assert (device == self.cache.lengths).all(), (device, self.cache.lengths)
        Checked.checked += 1


@pytest.mark.parametrize("pipeline", [True, False])
def test_exact_lengths_match_the_cache_with_drafts_partly_accepted(target, pipeline):
    """A draft model that is often wrong: each round keeps a different number of the drafts
    it fed, and rolls the rest back."""
    prompts = mixed_prompts(7, seed=5, lengths=[3, 17, 9, 40, 2, 26, 12])
    drafter = Checked(perturbed(target, scale=0.1), prefill_step_size=8)
    engine = Engine(target, drafter=drafter, max_batch_size=3, draft_depth=3, pipeline=pipeline)
    engine.depth_policy = Schedule(3)  # type: ignore[assignment]
    Checked.checked = 0
    engine.generate(prompts, SamplingParams(max_tokens=40))
    assert 0.2 < acceptance(engine) < 0.9  # partly accepted: kept chains of every length
    assert Checked.checked > 0
