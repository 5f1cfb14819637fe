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


class Eager(MTPDrafter):
    """Runs every verify's pairs into the head at the next commit (all but the newest, which
    the next drafting round reads its first draft from): no packed windows."""

    def commit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().commit(*args, **kwargs)
        if len(self.backlog) > 1:
            newest = self.backlog.pop()
            self._absorb()
            self.backlog = [newest]


def test_packed_backlog_drafts_what_round_by_round_absorbing_drafts(setup):
    target, head = setup
    prompts = mixed_prompts(4, seed=2)
    drafts = {}
    for kind in (Eager, MTPDrafter):
        engine = Engine(target, drafter=kind(target, head), max_batch_size=4, draft_depth=3)
        engine.depth_policy = Every(max_depth=3)
        engine.config.adaptive_depth = True
        proposals = []
        orig = engine.drafter.propose  # type: ignore[union-attr]

        def spy(request, orig=orig, proposals=proposals, engine=engine):
            p = orig(request)
            engine.settle()  # reading mid-round: the launch before may still be encoding
            proposals.append(np.array(p.device_tokens()))
            return p

        engine.drafter.propose = spy  # type: ignore[union-attr,method-assign]
        outs = engine.generate(prompts, SamplingParams(max_tokens=24))
        for p, o in zip(prompts, outs):
            assert_matches(o.tokens, reference_greedy(target, p, 24), kind.__name__)
        drafts[kind] = proposals
    assert len(drafts[Eager]) == len(drafts[MTPDrafter]) >= 3
    same = sum(np.array_equal(a, b) for a, b in zip(drafts[Eager], drafts[MTPDrafter]))
    assert same == len(drafts[Eager]), f"{same}/{len(drafts[Eager])} proposals identical"


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
    rounds = len([s for s in engine.take_round_stats() if s.batch_size])
    # Only the prompts' prefill ran the head (one step per joining group), however many rounds
    # went by: pairs past max_backlog verifies are dropped, not absorbed.
    assert rounds > 2 * drafter.max_backlog and steps["n"] <= 2, (steps["n"], rounds)
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 40), "depth 0")
    mx.eval(drafter.cache.state_arrays())


def test_rows_that_lost_pairs_restart_the_head_from_the_kept_ones(setup):
    """After a long depth-0 stretch the head restarts each row's cache from the pairs of the
    last max_backlog verifies (no gap in its context), and outputs stay mlx-lm's."""
    target, head = setup
    drafter = MTPDrafter(target, head)
    drafter.max_backlog = 3
    restarted = []  # head cache lengths right after each absorb that restarted rows
    orig = drafter._absorb

    def spy():  # type: ignore[no-untyped-def]
        restart = drafter._restart.copy()
        out = orig()
        if restart.any():
            engine.settle()  # reading mid-round: the launch before may still be encoding
            mx.eval(drafter.cache.lengths_mx)
            restarted.append((restart, np.array(drafter.cache.lengths_mx)))
        return out

    drafter._absorb = spy  # type: ignore[method-assign]
    engine = Engine(target, drafter=drafter, max_batch_size=2, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = Every(max_depth=3)
    engine.depth_policy.period = 8  # 7 plain verifies between drafting rounds: 4 dropped
    prompts = mixed_prompts(2, seed=5)
    outs = engine.generate(prompts, SamplingParams(max_tokens=40))
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 40), "restarted head")
    assert len(restarted) >= 2, restarted
    for restart, lengths in restarted:
        # Every row lost pairs; its cache now holds the kept pairs only: 3 verifies of one
        # pair each (depth 0), not its prompt and earlier tokens.
        assert restart.all() and (lengths == 3).all(), (restart, lengths)


def test_a_joining_prompt_enters_the_head_through_its_last_pairs(setup):
    """prompt_window bounds the head's prefill; drafts still come, outputs stay mlx-lm's."""
    target, head = setup
    prompts = mixed_prompts(4, seed=6, lengths=[17, 9, 33, 2])
    drafter = MTPDrafter(target, head, prompt_window=5)
    joined = []
    orig = drafter.add_rows

    def spy(histories, hidden=None):  # type: ignore[no-untyped-def]
        before = drafter.cache.num_rows
        orig(histories, hidden)
        # In the cache, plus the last pair held in the backlog for the first drafting round.
        held = drafter.backlog[-1].count_host[before:] if drafter.backlog else 0
        joined.append(drafter.cache.lengths[before:] + held)
        assert (drafter.ready[before:] == (held > 0)).all()  # a held pair drafts at once

    drafter.add_rows = spy  # type: ignore[method-assign]
    engine = Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=24))
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 24), "prompt window 5")
    # Pairs (h_t, x_t+1) the head took per prompt: the last 5, or all a short prompt has.
    assert sorted(np.concatenate(joined).tolist()) == [1, 5, 5, 5], joined
    assert sum(s.num_draft_tokens for s in engine.take_round_stats()) > 0


class SettledPlainFor(Every):
    """Plain decoding settled for batches of `plain_from` rows or more; drafts every round
    below (the policy's own warm-up is tested in test_depth_policy.py)."""

    plain_from = 3

    def choose(self, batch_size: int) -> int:
        return 0 if batch_size >= self.plain_from else self.max_depth

    def settled_plain(self, batch_size: int) -> bool:
        return batch_size >= self.plain_from


def record_joins(drafter: MTPDrafter) -> list[tuple[int, bool]]:
    """The list each `add_rows` call of `drafter` appends to from now on: (rows joining,
    whether their prompts' hidden came with them)."""
    joined: list[tuple[int, bool]] = []
    orig = drafter.add_rows

    def spy(histories, hidden=None):  # type: ignore[no-untyped-def]
        joined.append((len(histories), hidden is not None))
        orig(histories, hidden)

    drafter.add_rows = spy  # type: ignore[method-assign]
    return joined


def test_rows_joining_a_settled_plain_batch_skip_the_heads_prompt_pairs(setup):
    """Where the policy has settled on plain decoding, a joiner's prompt pairs would go unused:
    the prefill computes no window hidden and the head takes no pairs (on the 2-core CPU they
    made MTP's prefill 7-12% dearer at B=16). Rows that join a drafting batch still take them,
    and a skipped row that drafts later (the batch shrank) starts from its verifies' pairs."""
    target, head = setup
    prompts = mixed_prompts(4, seed=7, lengths=[12, 20, 9, 15])
    drafter = MTPDrafter(target, head, prompt_window=8)
    joined = record_joins(drafter)
    engine = Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = SettledPlainFor(max_depth=3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (40, 8, 8, 8)]
    outs = engine.generate(prompts, params)
    for p, o, sp in zip(prompts, outs, params):
        assert_matches(o.tokens, reference_greedy(target, p, sp.max_tokens), "settled plain")
    assert joined and all(not with_hidden for n, with_hidden in joined), joined
    # The long row drafts once the short ones left (B=1 drafts), from its verifies' pairs.
    assert sum(s.num_draft_tokens for s in engine.take_round_stats()) > 0
    two = SettledPlainFor(max_depth=3)
    two.plain_from = 5  # never settled at these sizes: every joiner takes its pairs
    engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=4, draft_depth=3)
    engine.config.adaptive_depth = True
    engine.depth_policy = two
    seen = []
    real = engine.drafter.add_rows  # type: ignore[union-attr]
    engine.drafter.add_rows = lambda h, hidden=None: (
        seen.append(hidden is not None),
        real(h, hidden),
    )  # type: ignore[union-attr]
    engine.generate(prompts, params)
    assert seen and all(seen), seen


def test_a_join_counts_the_waiting_requests_in_the_batch_it_joins(setup):
    """A batch job's queue fills the batch within a few steps, though its first prefill may
    hold only the rows of similar lengths: joiners are weighed at the batch they will run in
    (running + joining + the waiting that fit its free slots and KV budget), so a batch
    settled on plain skips the prompt pairs from its first join (a batch below 3 rows drafts
    here, and took them). Joins into a drafting batch still take them (the test above)."""
    target, head = setup
    # The first group prefills the 12- and 25-token prompts alone (similar_lengths)
    prompts = mixed_prompts(6, seed=11, lengths=[12, 25, 60, 90, 40, 70])
    drafter = MTPDrafter(target, head, prompt_window=8)
    joined = record_joins(drafter)
    engine = Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3, adaptive_depth=True)
    engine.depth_policy = SettledPlainFor(max_depth=3)  # plain from 3 rows
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (6, 6, 6, 6, 6, 30)]
    outs = engine.generate(prompts, params)
    for p, o, sp in zip(prompts, outs, params):
        assert_matches(o.tokens, reference_greedy(target, p, sp.max_tokens), "queued joins")
    assert joined[0] == (2, False), joined  # 2 rows, 4 more waiting: a batch of 4
    assert sum(n for n, _ in joined) == 6 and not any(h for _, h in joined), joined
    # A KV budget that holds the first two (18 + 31 tokens reserved) but not the next waiting
    # one (66 more): the batch they run in is 2 rows, which drafts, so they take the pairs.
    drafter = MTPDrafter(target, head, prompt_window=8)
    joined = record_joins(drafter)
    engine = Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3,
                    adaptive_depth=True, kv_budget_tokens=110)  # fmt: skip
    engine.depth_policy = SettledPlainFor(max_depth=3)
    outs = engine.generate(prompts, params)
    for p, o, sp in zip(prompts, outs, params):
        assert_matches(o.tokens, reference_greedy(target, p, sp.max_tokens), "kv-bound joins")
    assert joined[0] == (2, True), joined
