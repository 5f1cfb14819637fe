"""Hybrid targets (qwen3_5: GatedDeltaNet + attention): per-row recurrent-state rollback."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from tests.tiny import OracleDrafter, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.forward import forward_window, pad_windows, prefill
from workers.hybrid import RaggedStateCache
from workers.kv_cache import BatchCache

MAX_TOKENS = 20


@pytest.fixture(scope="module")
def hybrid():
    model = tiny_model("qwen3_5", seed=3, layers=4)
    prompts = mixed_prompts(6, seed=11)
    refs = [reference_greedy(model, p, MAX_TOKENS) for p in prompts]
    return model, prompts, refs


@pytest.mark.parametrize("depth", [1, 3, 5])
def test_hybrid_greedy_parity_with_mixed_accepts(hybrid, depth):
    model, prompts, refs = hybrid
    oracle = {tuple(p): r[0] for p, r in zip(prompts, refs)}
    for bs in (1, 6):
        engine = Engine(model, drafter=OracleDrafter(oracle), max_batch_size=bs, draft_depth=depth)
        outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        for i, (o, ref) in enumerate(zip(outs, refs)):
            assert_matches(o.tokens, ref, f"hybrid B={bs} depth={depth} row {i}")
        stats = engine.take_round_stats()
        assert (
            0 < sum(s.num_accepted_tokens for s in stats) < sum(s.num_draft_tokens for s in stats)
        )
        if bs > 1 and depth > 1:
            assert sum(len(set(s.accepted_per_row)) > 1 for s in stats) >= 2
    plain = Engine(model, max_batch_size=6).generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    for i, (o, ref) in enumerate(zip(plain, refs)):
        assert_matches(o.tokens, ref, f"hybrid plain row {i}")


def alone_states(model, tokens: list[int]):
    """mlx-lm's own caches after running `tokens` through the model alone (independent)."""
    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def test_rollback_after_accepts_0_K_1_2_equals_running_alone(hybrid):
    model, _, _ = hybrid
    K = 4
    accepts = [0, K, 1, 2]
    prompts = mixed_prompts(4, seed=2, lengths=[3, 11, 6, 20])
    cache = BatchCache.for_model(model, 4)
    prefill(model, cache, prompts, step_size=512)
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 256, size=K + 1).tolist() for _ in prompts]
    tokens, valid = pad_windows(windows)
    forward_window(model, cache, tokens, valid)
    cache.commit(np.array(accepts) + 1)
    for r, (p, w, a) in enumerate(zip(prompts, windows, accepts)):
        ref = alone_states(model, p + w[: a + 1])
        for layer, mine in zip(ref, cache.layers):
            if isinstance(mine, RaggedStateCache):
                conv_ref, state_ref = layer[0], layer[1]
                assert mx.allclose(mine.conv[r : r + 1], conv_ref, atol=1e-5).item(), r
                assert mx.allclose(mine.state[r : r + 1], state_ref, atol=1e-5).item(), r


@pytest.mark.parametrize("drafter", ["oracle", "mtp"])
def test_fused_window_path_reruns_each_rows_kept_prefix(hybrid, monkeypatch, drafter):
    """Where the recurrence is one kernel (Metal, CUDA) a verify window yields only its final
    state, and commit reruns the window from the state before it with each row's rejected
    tail masked (workers/gdn_recurrence.py). On the CPU the same path runs with mlx-lm's ops
    loop as the recurrence: tokens must equal mlx-lm's, with counts from the host (oracle:
    one round at a time) and from the device (MTP: pipelined rounds)."""
    from tests.tiny import fit_mtp_head
    from workers import hybrid as hybrid_module
    from workers.drafters.mtp import MTPDrafter
    from workers.gdn_recurrence import MODE_ENV

    model, prompts, refs = hybrid
    monkeypatch.setenv(MODE_ENV, "ops")
    reruns = []
    state_after = hybrid_module.Rerun.state_after

    def counted(self, before, keep):
        reruns.append(keep)
        return state_after(self, before, keep)

    monkeypatch.setattr(hybrid_module.Rerun, "state_after", counted)
    if drafter == "oracle":
        made = OracleDrafter({tuple(p): r[0] for p, r in zip(prompts, refs)})
    else:
        made = MTPDrafter(model, fit_mtp_head(model, steps=40))
    engine = Engine(model, drafter=made, max_batch_size=6, draft_depth=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    for i, (o, ref) in enumerate(zip(outs, refs)):
        assert_matches(o.tokens, ref, f"fused path, {drafter} drafter, row {i}")
    assert reruns, "the two-pass path must have run"
    stats = engine.take_round_stats()
    assert sum(len(set(s.accepted_per_row)) > 1 for s in stats) >= 1  # rows kept different n
