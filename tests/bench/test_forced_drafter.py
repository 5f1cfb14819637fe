"""bench/forced_drafter.py through the real engine on a tiny model: with the plain greedy
output as reference every draft is accepted; with corruption some are rejected; either way the
tokens are the plain ones (speculation is lossless)."""

from __future__ import annotations

import pytest

from bench.forced_drafter import ForcedDrafter
from tests.tiny import VOCAB, mixed_prompts, tiny_model
from workers import Engine, SamplingParams


@pytest.mark.parametrize("corrupt_every", [None, 3])
def test_forced_acceptance_and_corruption(corrupt_every: int | None) -> None:
    model = tiny_model("llama", seed=0)
    prompts = mixed_prompts(5, seed=2)
    sp = SamplingParams(max_tokens=20, ignore_eos=True)
    plain = [o.tokens for o in Engine(model, max_batch_size=5).generate(prompts, sp)]
    refs = {tuple(p): t for p, t in zip(prompts, plain, strict=True)}
    drafter = ForcedDrafter(refs, vocab=VOCAB, corrupt_every=corrupt_every)
    engine = Engine(model, drafter=drafter, max_batch_size=3, draft_depth=4)
    outs = engine.generate(prompts, sp)  # 5 prompts over 3 slots: rows join and leave
    assert [o.tokens for o in outs] == plain
    drafted = sum(o.num_draft_tokens for o in outs)
    accepted = sum(o.num_accepted_tokens for o in outs)
    if corrupt_every is None:
        assert drafted > 0 and accepted == drafted
    else:
        assert 0 < accepted < drafted


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="refs is empty"):
        ForcedDrafter({}, vocab=VOCAB)
    with pytest.raises(ValueError, match="corrupt_every=0"):
        ForcedDrafter({(1,): [2]}, vocab=VOCAB, corrupt_every=0)
    with pytest.raises(ValueError, match=r"no reference continuation .* \[9, 9\]"):
        ForcedDrafter({(1,): [2]}, vocab=VOCAB).add_rows([[9, 9]])
