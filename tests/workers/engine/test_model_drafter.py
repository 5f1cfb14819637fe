"""The draft-model drafter feeds its cache exactly the rows' histories, also while rounds are
pipelined (its tokens from rounds the host has not read are device arrays).

A drafter that mis-feeds its cache still decodes correctly (the target verifies every draft), so
parity cannot catch it; what catches it is a draft model that *is* the target: then its greedy
drafts are the target's own continuation, and every one of them must be accepted. Any token
fed twice, skipped or misplaced (joins, rounds that draft nothing, host tokens caught up in
prefill chunks, the switch between pipelined and host-synced rounds) makes drafts wrong, and
acceptance falls well below 1 (measured 0.73-0.79 with the window's last token kept in the
cache, with a pending round dropped at `tighten`, or with the host's count of read tokens not
refreshed after a host-synced round).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny import mixed_prompts, perturbed, reference_greedy, tiny_model
from workers import Engine, ModelDrafter, SamplingParams

MAX_TOKENS = 14


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen3", seed=7)


def acceptance(engine: Engine) -> float:
    stats = engine.take_round_stats()
    drafted = sum(s.num_draft_tokens for s in stats)
    assert drafted > 0, "no round drafted"
    return sum(s.num_accepted_tokens for s in stats) / drafted


class Schedule:
    """A depth policy stand-in: depth 0 for two rounds out of every `period` (plain rounds
    whose tokens the drafter must catch up on), the engine's depth otherwise."""

    def __init__(self, depth: int, period: int = 5) -> None:
        self.depth, self.period, self.rounds = depth, period, 0

    def choose(self, batch_size: int) -> int:
        self.rounds += 1
        return 0 if self.rounds % self.period in (1, 2) else self.depth

    def observe(self, *args: object) -> None:
        pass

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


def test_rows_that_sample_switch_the_batch_to_host_synced_rounds_and_back(target):
    """A sampled row joining a greedy batch stops pipelining (the engine reads every round
    back); the drafter then learns its pending tokens from the histories."""
    prompts = mixed_prompts(6, seed=9)
    drafter = ModelDrafter(target)
    engine = Engine(target, drafter=drafter, max_batch_size=3, draft_depth=2)
    params = [SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)] * 6
    params[3] = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, seed=1)
    synced = []
    real = engine._round

    def counted(stats):  # type: ignore[no-untyped-def]
        synced.append(True)
        return real(stats)

    engine._round = counted  # type: ignore[method-assign]
    engine.generate(prompts, params)
    assert synced, "no host-synced round: the test did not switch modes"
    # Drafts equal to the target's distribution are accepted by rejection sampling too.
    assert acceptance(engine) > 0.9


class Checked(ModelDrafter):
    """Checks that the host's exact lengths are the cache's own wherever the host has read the
    rounds (after every tighten, and after a host-synced round's commit)."""

    checked = 0

    def tighten(self, bounds, rows, in_flight=True):  # type: ignore[no-untyped-def]
        super().tighten(bounds, rows, in_flight)
        self.check()

    def commit(self, num_accepted, hidden=None, tokens=None):  # type: ignore[no-untyped-def]
        super().commit(num_accepted, hidden, tokens)
        if isinstance(num_accepted, np.ndarray):
            self.check()

    def check(self) -> None:
        done = self.chain_launch < 0
        device = np.array(self.cache.lengths_mx)
        assert (device[done] == self.exact_len[done]).all(), (device, self.exact_len, done)
        Checked.checked += int(done.sum())


@pytest.mark.parametrize("pipeline", [True, False])
def test_exact_lengths_match_the_cache_with_drafts_partly_accepted(target, pipeline):
    """A draft model that is often wrong: each round keeps a different number of chained
    drafts, which the host learns only once it reads the round."""
    prompts = mixed_prompts(7, seed=5, lengths=[3, 17, 9, 40, 2, 26, 12])
    drafter = Checked(perturbed(target, scale=0.1), prefill_step_size=8)
    engine = Engine(target, drafter=drafter, max_batch_size=3, draft_depth=3, pipeline=pipeline)
    engine.depth_policy = Schedule(3)  # type: ignore[assignment]
    Checked.checked = 0
    engine.generate(prompts, SamplingParams(max_tokens=40))
    assert 0.2 < acceptance(engine) < 0.9  # partly accepted: kept chains of every length
    assert Checked.checked > 0
