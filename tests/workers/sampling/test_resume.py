"""A resumed request (prompt + its own earlier output as the new prompt, as the scheduler sends
after a requeue) continues exactly like the uninterrupted run when it says how many prompt
tokens are output (SamplingParams.num_resumed_tokens): presence_penalty counts them as output.

Reference: the same engine generating the whole request in one go.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.tiny import mixed_prompts, perturbed, tiny_model
from workers import Engine, ModelDrafter, SamplingParams

N = 24


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama", seed=3)
    return target, perturbed(target, scale=0.1, seed=1)


def penalised(seed: int, **kw) -> SamplingParams:
    return SamplingParams(
        max_tokens=N,
        temperature=0.9,
        seed=seed,
        repetition_penalty=1.3,
        presence_penalty=1.5,
        acceptance="coupled",
        ignore_eos=True,
        **kw,
    )


@pytest.mark.parametrize("drafted", [False, True])
def test_resumed_rows_continue_like_the_uninterrupted_run(pair, drafted: bool) -> None:
    target, draft = pair

    def engine() -> Engine:
        drafter = ModelDrafter(draft) if drafted else None
        return Engine(target, drafter=drafter, max_batch_size=4, draft_depth=3)

    prompts = mixed_prompts(4, seed=11, lengths=[3, 9, 1, 17])
    params = [penalised(seed=40 + i) for i in range(4)]
    full = [o.tokens for o in engine().generate(prompts, params)]
    assert all(len(f) == N for f in full)
    unaware = 0
    for k in (1, N // 2, N - 3):
        resumed = [dataclasses.replace(p, max_tokens=N - k, num_resumed_tokens=k) for p in params]
        new_prompts = [p + f[:k] for p, f in zip(prompts, full, strict=True)]
        got = [o.tokens for o in engine().generate(new_prompts, resumed)]
        assert got == [f[k:] for f in full], f"resumed after {k} tokens"
        # Sensitivity: counting the resumed tokens as prompt changes the continuation.
        plain = [dataclasses.replace(p, num_resumed_tokens=0) for p in resumed]
        unaware += [o.tokens for o in engine().generate(new_prompts, plain)] != got
    assert unaware >= 2


def test_num_resumed_tokens_is_validated(pair) -> None:
    target, _ = pair
    with pytest.raises(ValueError, match="num_resumed_tokens"):
        SamplingParams(num_resumed_tokens=-1)
    with pytest.raises(ValueError, match="num_resumed_tokens"):
        SamplingParams(num_resumed_tokens=True)
    engine = Engine(target, max_batch_size=2)
    with pytest.raises(ValueError, match=r"num_resumed_tokens=3 .* prompt of 2 tokens"):
        engine.add_request("bad", [1, 2], SamplingParams(num_resumed_tokens=3))
    out = engine.generate([[1, 2]], penalised(seed=1, num_resumed_tokens=2))
    assert len(out[0].tokens) == N
