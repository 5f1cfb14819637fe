"""Joining rows prefill in groups of similar lengths: a prefill batch pads every row to its
longest, so a 20-token prompt beside a 300-token one would compute 280 padded positions."""

from __future__ import annotations

import pytest

from tests.tiny import mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.prefill_job import PAD_RATIO, PAD_SLACK, similar_lengths
from workers.rows import Row


def rows(lengths: list[int]) -> list[Row]:
    sp = SamplingParams()
    return [
        Row(str(i), sp, n, list(range(n)), stop_ids=frozenset(), stop_seqs=(), max_context=4096)
        for i, n in enumerate(lengths)
    ]


def test_the_oldest_row_keeps_the_rows_that_pad_little_beside_it_in_order():
    group = similar_lengths(rows([100, 10, 105, 300, 95]))
    assert [r.request_id for r in group] == ["0", "2", "4"]
    sizes = [len(r.history) - 1 for r in group]
    assert len(sizes) * max(sizes) <= PAD_RATIO * sum(sizes) + PAD_SLACK * len(sizes)
    # Short prompts batch together thanks to the per-row slack; one row is its own group.
    assert len(similar_lengths(rows([3, 9, 12, 5]))) == 4
    assert [r.request_id for r in similar_lengths(rows([40]))] == ["0"]


def test_ragged_prompts_join_in_length_groups_and_match_mlx_lm():
    target = tiny_model("qwen3", seed=1, layers=2)
    prompts = mixed_prompts(4, seed=9, lengths=[120, 8, 128, 10])
    engine = Engine(target, max_batch_size=4)
    sp = SamplingParams(max_tokens=12)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, sp)
    events = engine.step()  # the oldest row's group prefills first; the short ones wait a step
    assert sorted(r.request_id for r in engine.rows) == ["0", "2"]
    assert [r.request_id for r in engine.waiting] == ["1", "3"]
    got: dict[str, list[int]] = {str(i): [] for i in range(4)}
    while engine.has_work():
        for ev in events + engine.step():
            got[ev.request_id] += ev.new_tokens
        events = []
    for i, p in enumerate(prompts):
        assert_matches(got[str(i)], reference_greedy(target, p, 12), f"row {i}")


@pytest.mark.parametrize("lengths", [[7, 7, 7], [1, 2, 3]])
def test_similar_prompts_still_prefill_as_one_batch(lengths):
    assert len(similar_lengths(rows(lengths))) == len(lengths)


@pytest.mark.parametrize("cut, min_skipped, chunks", [
    (True, 30, [(0, 15, False), (15, 7, True)]),  # no last layer before the window
    (True, 31, [(0, 22, True)]),  # 2 rows x 15 positions: too few to pay a second forward
    (False, 0, [(0, 22, True)]),  # MLX CUDA's: one forward, the hidden before the window dropped
])  # fmt: skip
def test_an_mtp_prefill_keeps_hidden_for_the_heads_window_only(
    cut, min_skipped, chunks, monkeypatch
):
    """Cut at the head's window, positions before it are prefilled without the hidden (the last
    layer's attention and MLP never run there) where that skips CUT_MIN_SKIPPED tokens or more;
    uncut, one forward computes it and drops what precedes the window. Either way the window's
    hidden equals a whole-prompt forward's."""
    import mlx.core as mx

    import workers.prefill_job as pj

    monkeypatch.setattr(pj, "CUT_MIN_SKIPPED", min_skipped)

    from workers.forward import prefill_chunk
    from workers.kv_cache import BatchCache
    from workers.mtp.hidden import target_hidden_and_logits
    from workers.prefill_job import Prefill, prompt_hidden

    target = tiny_model("qwen3", seed=2, layers=2)
    group = rows([20, 23])
    for r, p in zip(group, mixed_prompts(2, seed=3, lengths=[20, 23])):
        r.history = list(p)
    job = Prefill(group, BatchCache.for_model(target, 2), tail=4, cut_at_window=cut)
    assert job.hidden_from == 15  # min over rows of (19 - 4, 22 - 4)
    calls = []

    def spy(model, cache, seqs, start, step, want, post_norm):  # type: ignore[no-untyped-def]
        calls.append((start, step, want))
        return prefill_chunk(model, cache, seqs, start, step, want, post_norm)

    orig, pj.prefill_chunk = pj.prefill_chunk, spy
    try:
        assert job.advance(target, 512, post_norm=False, one_chunk=False)
    finally:
        pj.prefill_chunk = orig
    assert calls == chunks
    got = prompt_hidden(job)
    assert got is not None and got.shape[:2] == (2, 4)
    for i, r in enumerate(group):
        whole, _ = target_hidden_and_logits(target, mx.array([r.history[:-1]]))
        want = whole[0, -4:]
        assert mx.allclose(got[i], want, atol=1e-5).item(), i


def test_a_backend_that_builds_a_graph_per_shape_prefills_joiners_as_one_batch():
    """On MLX CUDA (pad_verify) every further prefill forward is a new graph and padding is
    cheap: all joiners that fit prefill together, as before grouping."""
    target = tiny_model("qwen3", seed=1, layers=2)
    engine = Engine(target, max_batch_size=4)
    engine.pad_verify = True
    sp = SamplingParams(max_tokens=4)
    for i, p in enumerate(mixed_prompts(4, seed=9, lengths=[120, 8, 128, 10])):
        engine.add_request(str(i), p, sp)
    engine.step()
    assert sorted(r.request_id for r in engine.rows) == ["0", "1", "2", "3"]


def test_uncut_mtp_prefill_drafts_what_the_cut_one_drafts(monkeypatch):
    """The engine with MLX CUDA's uncut prefill (forced on the CPU) hands the head the same
    window hidden as the CPU's cut prefill: with
    rows joining a running batch (a round sooner uncut: one prefill chunk, not two), the same
    tokens and the same drafts accepted."""
    import json

    import workers.prefill_job as pj
    from workers.backend import Backend
    from workers.config import DEFAULT_MODEL_DIR

    lines = (DEFAULT_MODEL_DIR / "heldout_prompts.jsonl").read_text().splitlines()[:6]
    runs = []
    for cut in (True, False):
        backend = Backend(builds_per_shape=not cut, computes_in_launch=True)

        class PrefillSees:  # only the prefill job sees MLX CUDA's backend
            @staticmethod
            def current(b: Backend = backend) -> Backend:
                return b

        monkeypatch.setattr(pj, "Backend", PrefillSees)
        engine = Engine.load(drafter="mtp", max_batch_size=3, draft_depth=3)
        prompts = [engine.tokenizer.encode(json.loads(x)["body"]["prompt"]) for x in lines]
        outs = engine.generate(prompts, SamplingParams(max_tokens=16))
        stats = engine.take_round_stats()
        runs.append(([o.tokens for o in outs], sum(s.num_accepted_tokens for s in stats)))
    assert runs[0] == runs[1]
    assert runs[0][1] > 0
