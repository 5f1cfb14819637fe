"""Prefix cache exactness: greedy output with the cache == without it == mlx-lm's reference.

Prompts share a prefix with a first request at an exact block boundary, mid-block, the whole
prompt, and one token past it, under every drafter; the cached token counts are asserted from
the construction (blocks of 8 tokens), so a cache that silently missed would fail too.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.tiny import VOCAB, fit_mtp_head, perturbed, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, ModelDrafter, NgramDrafter, SamplingParams
from workers.drafters.mtp import MTPDrafter

BS = 8  # prefix_block_tokens in these tests
MAX_TOKENS = 16
rng = np.random.default_rng(5)
BASE = rng.integers(0, VOCAB, size=49).tolist()  # the first owner's prompt: 48 cacheable tokens


def _other(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, VOCAB, size=n).tolist()


# (name, prompt, tokens cached once BASE ran, the same for an MTP row): the cache holds
# BASE[:48] as 6 blocks. An MTP row's hit reaches into its head's window (its last WINDOW
# prompt positions, from the block that window starts in) only through blocks holding their
# hidden states: BASE's prefill computed them for its own window's block, [40, 48).
WINDOW = 4
FOLLOWERS = [
    ("block_boundary", BASE[:32] + _other(9, 1), 32, 32),
    ("mid_block", BASE[:28] + _other(11, 2), 24, 24),
    ("whole_prompt", list(BASE), 48, 48),  # history[:-1] is all cached: nothing to prefill
    ("one_past", BASE + _other(1, 3), 48, 48),
    ("window_cut", BASE[:40] + _other(3, 5), 40, 32),  # window from 38: block [32, 40) has none
    ("unrelated", _other(30, 4), 0, 0),
]


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen3", seed=3)


@pytest.fixture(scope="module")
def refs(target):
    prompts = [BASE] + [f[1] for f in FOLLOWERS]
    return {tuple(p): reference_greedy(target, p, MAX_TOKENS) for p in prompts}


@pytest.fixture(scope="module")
def mtp_head(target):
    return fit_mtp_head(target, steps=60)


def _drafter(kind: str, target, mtp_head):
    if kind == "model":
        return ModelDrafter(perturbed(target, scale=0.35))
    if kind == "ngram":
        return NgramDrafter()
    if kind == "mtp":
        return MTPDrafter(target, mtp_head, prompt_window=WINDOW)
    return None


def _engine(target, drafter, cache_tokens: int, **kw) -> Engine:
    return Engine(
        target,
        drafter=drafter,
        prefix_cache_tokens=cache_tokens,
        prefix_block_tokens=BS,
        draft_depth=3,
        **kw,
    )


@pytest.mark.parametrize("drafter", ["none", "ngram", "model", "mtp"])
def test_shared_prefixes_match_reference_and_uncached(target, refs, mtp_head, drafter):
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    results = {}
    for cache_tokens in (0, 4096):
        engine = _engine(target, _drafter(drafter, target, mtp_head), cache_tokens)
        first = engine.generate([BASE], sp)
        rest = engine.generate([f[1] for f in FOLLOWERS], sp)
        results[cache_tokens] = first + rest
        stats = engine.take_round_stats()
        if cache_tokens:
            assert first[0].num_cached_tokens == 0
            wants = [w_mtp if drafter == "mtp" else w for _, _, w, w_mtp in FOLLOWERS]
            for (name, *_), want, out in zip(FOLLOWERS, wants, rest):
                assert out.num_cached_tokens == want, name
            hits = sum(s.num_prefix_hit_tokens for s in stats)
            assert hits == sum(wants)
            assert sum(s.num_prefix_queried_tokens for s in stats) == sum(
                len(p) for p in [BASE] + [f[1] for f in FOLLOWERS]
            )
        else:
            assert all(o.num_cached_tokens == 0 for o in results[0])
    prompts = [BASE] + [f[1] for f in FOLLOWERS]
    for i, prompt in enumerate(prompts):
        for cache_tokens, outs in results.items():
            assert_matches(
                outs[i].tokens, refs[tuple(prompt)], f"{drafter} cache={cache_tokens} {i}"
            )
        if drafter == "mtp":
            # Drafts read the window's hidden states, restored from the cache or computed after
            # the hit: they propose what a cold prefill's do, so the accept counts match too.
            assert results[4096][i].num_accepted_tokens == results[0][i].num_accepted_tokens


def test_eviction_under_a_tiny_budget(target, refs):
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    other = _other(30, 4)
    engine = _engine(target, None, 2 * BS)  # room for two blocks
    engine.generate([BASE], sp)
    assert engine.prefix_cache.used_tokens == 2 * BS
    engine.generate([other], sp)  # its two blocks evict BASE's
    again = engine.generate([BASE, other], sp)
    assert [o.num_cached_tokens for o in again] == [0, 2 * BS]
    stats = engine.take_round_stats()
    assert sum(s.num_prefix_evicted_tokens for s in stats) >= 2 * BS
    assert max(s.prefix_cache_used_tokens for s in stats) <= 2 * BS
    assert_matches(again[0].tokens, refs[tuple(BASE)], "evicted")
    assert_matches(again[1].tokens, refs[tuple(other)], "kept")


def test_prefix_reused_while_its_owner_is_running(target, refs):
    engine = _engine(target, NgramDrafter(), 4096)
    engine.add_request("owner", BASE, SamplingParams(max_tokens=MAX_TOKENS))
    got: dict[str, list[int]] = {"owner": [], "late": []}
    cached = {}
    while not got["owner"]:
        for ev in engine.step():
            got[ev.request_id] += ev.new_tokens
    follower = FOLLOWERS[0][1]
    engine.add_request("late", follower, SamplingParams(max_tokens=MAX_TOKENS))
    owner_running_when_late_joined = False
    while engine.has_work():
        for ev in engine.step():
            got[ev.request_id] += ev.new_tokens
            cached[ev.request_id] = ev.num_cached_tokens
        if any(r.request_id == "late" for r in engine.rows):
            owner_running_when_late_joined |= any(r.request_id == "owner" for r in engine.rows)
    assert owner_running_when_late_joined
    assert cached == {"owner": 0, "late": 32}
    assert_matches(got["owner"], refs[tuple(BASE)], "owner")
    assert_matches(got["late"], refs[tuple(follower)], "late")


def test_same_prefix_joiners_wait_one_prefill_then_hit(target, refs):
    """Joiners sharing an uncached first block: one prefills it, the others wait a step and
    hit; aborting a waiting one leaves the cache and the rest intact."""
    engine = _engine(target, None, 4096, max_batch_size=8)
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    prompts = {"a": BASE, "b": FOLLOWERS[0][1], "c": FOLLOWERS[1][1], "d": FOLLOWERS[3][1]}
    for rid, p in prompts.items():
        engine.add_request(rid, p, sp)
    events = engine.step()  # "a" prefills; b, c, d wait for it
    assert [r.request_id for r in engine.rows] == ["a"]
    assert [r.request_id for r in engine.waiting] == ["b", "c", "d"]
    engine.abort("c")
    got: dict[str, list[int]] = {k: [] for k in prompts}
    final = {}
    while engine.has_work():
        for ev in events + engine.step():
            got[ev.request_id] += ev.new_tokens
            if ev.finished:
                final[ev.request_id] = ev
        events = []
    assert final["c"].finish_reason == "abort" and got["c"] == []
    assert {k: final[k].num_cached_tokens for k in "abd"} == {"a": 0, "b": 32, "d": 48}
    for k in "abd":
        assert_matches(got[k], refs[tuple(prompts[k])], k)


def test_abort_during_chunked_prefill_keeps_cache_consistent(target, refs):
    engine = _engine(target, None, 4096, prefill_step_size=8)
    sp = SamplingParams(max_tokens=MAX_TOKENS)
    engine.add_request("runner", _other(5, 9), SamplingParams(max_tokens=40))
    engine.step()
    engine.add_request("gone", BASE, sp)
    engine.step()  # "gone" prefills its first chunk alongside the running row
    assert engine._prefill is not None and engine._prefill.rows[0].request_id == "gone"
    engine.abort("gone")
    while engine.has_work():
        engine.step()
    # Its prefill completed before it was dropped: the KV was valid, so it stays cached.
    out = engine.generate([FOLLOWERS[3][1]], sp)[0]
    assert out.num_cached_tokens == 48
    assert_matches(out.tokens, refs[tuple(FOLLOWERS[3][1])], "after abort")


def test_coupled_seeded_sampling_is_token_identical(target):
    sp = [
        SamplingParams(max_tokens=MAX_TOKENS, temperature=0.9, seed=s, acceptance="coupled")
        for s in range(len(FOLLOWERS))
    ]
    outs = {}
    for cache_tokens in (0, 4096):
        engine = _engine(target, NgramDrafter(), cache_tokens)
        engine.generate([BASE], SamplingParams(max_tokens=4))
        outs[cache_tokens] = engine.generate([f[1] for f in FOLLOWERS], sp)
    assert [o.tokens for o in outs[0]] == [o.tokens for o in outs[4096]]
    assert sum(o.num_cached_tokens for o in outs[4096]) > 0


def test_hybrid_model_refuses_with_a_reason(caplog):
    target = tiny_model("qwen3_5", seed=3, layers=4)
    with caplog.at_level(logging.WARNING, logger="workers.prefix_cache"):
        engine = Engine(target, prefix_cache_tokens=4096, prefix_block_tokens=BS)
    assert engine.prefix_cache.disabled_reason == "recurrent_layers"
    assert "recurrent" in caplog.text
    sp = SamplingParams(max_tokens=4)
    outs = engine.generate([BASE, BASE], sp)
    assert outs[0].tokens == outs[1].tokens and outs[1].num_cached_tokens == 0


def test_blocks_hold_their_rows_slots_layer_by_layer(target):
    """Each inserted block holds, for every attention layer, exactly the slots of the row it was
    copied from: rows whose first blocks are already cached add only their new blocks (four,
    then one), copied from their own rows of a three-row prefill (keys and values, fp32, bit for bit). Each
    block owns its memory: no block's buffer lies in another's or in the prefill cache's (a
    view would keep a whole span alive after its other blocks are evicted)."""
    from workers.forward import prefill
    from workers.kv_cache import BatchCache
    from workers.prefix_cache import PrefixCache

    cache = BatchCache.for_model(target, num_rows=3)
    second = BASE[:16] + _other(33, 6)  # blocks 0-1 shared with BASE, 2-5 its own
    third = BASE[:40] + _other(9, 7)  # blocks 0-4 shared, 5 its own: a lone new block
    prefill(target, cache, [BASE, second, third], step_size=512)
    pc = PrefixCache(4096, BS)
    rows = [BASE[:48], second[:48], third[:48]]
    for row, tokens in enumerate(rows):
        pc.insert(tokens, cache, row)
    assert pc.used_tokens == 11 * BS  # 6 of BASE's, 4 new of the second's, 1 of the third's
    for row, tokens in enumerate(rows):
        chain = pc.lookup(tokens, len(tokens))
        assert len(chain) == 6
        for b, block in enumerate(chain):
            for side, parts in (("key_parts", block.keys), ("value_parts", block.values)):
                want = np.stack(
                    [
                        np.array(getattr(x, side)[0][row, :, b * BS : (b + 1) * BS])
                        for x in cache.layers
                    ]
                )
                np.testing.assert_array_equal(np.array(parts[0]), want, f"row {row} block {b}")
    arrays = [a for b in pc._lru.values() for a in (*b.keys, *b.values)]
    arrays += [p for x in cache.layers for p in (*x.key_parts, *x.value_parts)]
    spans = sorted(_buffer_span(a) for a in arrays)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), "shared buffers"


def _buffer_span(a) -> tuple[int, int]:
    """[first, last + 1) bytes of the memory an evaluated MLX array reads (zero-copy via numpy)."""
    x = np.asarray(a)
    first = x.__array_interface__["data"][0]
    last = first + sum((n - 1) * s for n, s in zip(x.shape, x.strides)) + x.itemsize
    return first, last
