"""Sampling through the real engine: coupled identity, determinism, acceptance, logprobs, errors.

Tiny random fp32 mlx-lm models built in code. The reference for "seeded decoding" is the same
engine with drafter=None and max_batch_size=1 (the plain one-row path), whose sampling rule is
argmax(warped + gumbel(seed, position)) (workers.sampling.keys).
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny import mixed_prompts, perturbed, tiny_model
from workers import Engine, ModelDrafter, NgramDrafter, SamplingParams


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama", seed=3)
    return target, perturbed(target, scale=0.1, seed=1)


def plain(target, prompts, params, batch):
    return [c.tokens for c in Engine(target, max_batch_size=batch).generate(prompts, params)]


# (draft depth, batch size, drafter): depths 1-8, batch sizes 1-8, 59 rows in all.
CONFIGS = [
    (1, 1, "model"),
    (2, 3, "model"),
    (3, 8, "model"),
    (4, 5, "ngram"),
    (5, 8, "model"),
    (6, 2, "model"),
    (7, 8, "ngram"),
    (8, 8, "model"),
    (4, 8, "model"),
    (2, 8, "model"),
]
TEMPS = [0.3, 0.6, 0.9, 1.2, 1.5]
TOP_P = [1.0, 0.9, 1.0, 0.7]
TOP_K = [0, 0, 20, 5, 0]


def test_coupled_is_token_identical_to_plain_seeded_decoding(pair):
    target, draft = pair
    seeds = itertools.count(1000)
    drafted = accepted = rows = 0
    for c, (depth, batch, kind) in enumerate(CONFIGS):
        prompts = mixed_prompts(batch, seed=c, lengths=[1, 5, 17, 9, 33, 2, 12, 26][::-1][:batch])
        params = []
        for _ in range(batch):
            j = next(seeds)
            params.append(
                SamplingParams(
                    max_tokens=10 + (j % 7),
                    temperature=0.0 if j % 11 == 0 else TEMPS[j % 5],  # some greedy rows
                    top_p=TOP_P[j % 4],
                    top_k=TOP_K[j % 5],
                    min_p=0.05 if j % 9 == 0 else 0.0,
                    # Penalties see the drafts appended position by position in the window.
                    repetition_penalty=1.3 if j % 4 == 1 else 1.0,
                    presence_penalty=0.4 if j % 3 == 1 else 0.0,
                    seed=j,
                    acceptance="coupled" if j % 6 else "exact",
                    ignore_eos=True,
                )
            )
        drafter = ModelDrafter(draft) if kind == "model" else NgramDrafter()
        engine = Engine(target, drafter=drafter, max_batch_size=batch, draft_depth=depth)
        spec = [o.tokens for o in engine.generate(prompts, params)]
        stats = engine.take_round_stats()
        drafted += sum(s.num_draft_tokens for s in stats)
        accepted += sum(s.num_accepted_tokens for s in stats)
        single = [plain(target, [p], [sp], 1)[0] for p, sp in zip(prompts, params, strict=True)]
        batched = plain(target, prompts, params, batch)
        for i in range(batch):
            assert spec[i] == single[i], f"config {c} (depth {depth}, B={batch}) row {i}"
            assert batched[i] == single[i], f"config {c}: plain batched row {i}"
        rows += batch
    assert rows >= 50
    assert 0 < accepted < drafted  # speculation really ran, with rejections


def test_seeded_rows_are_deterministic_alone_and_batched(pair):
    target, draft = pair
    prompts = mixed_prompts(6, seed=7)
    params = [
        SamplingParams(max_tokens=16, temperature=0.9, seed=40 + i, acceptance=m, ignore_eos=True)
        for i, m in enumerate(
            ["rejection", "coupled", "exact", "rejection", "rejection", "coupled"]
        )
    ]
    params[4] = SamplingParams(max_tokens=16, temperature=0.0)  # a greedy row in the batch

    def run(ps, ids, batch):
        e = Engine(target, drafter=ModelDrafter(draft), max_batch_size=batch, draft_depth=3)
        return [o.tokens for o in e.generate([prompts[i] for i in ids], ps)]

    batched = run(params, range(6), 6)
    assert batched == run(params, range(6), 6)  # same on every run
    for i in range(6):
        assert run([params[i]], [i], 1) == [batched[i]], f"row {i} alone vs batched"
    # Another neighbour mix: rows keep their tokens whoever shares the batch.
    assert run([params[3], params[0]], [3, 0], 2) == [batched[3], batched[0]]


def acceptance(target, draft, mode: str, temperature: float) -> float:
    prompts = mixed_prompts(8, seed=11)
    params = [
        SamplingParams(max_tokens=40, temperature=temperature, seed=i, acceptance=mode)
        for i in range(8)
    ]
    engine = Engine(target, drafter=ModelDrafter(draft), max_batch_size=8, draft_depth=4)
    engine.generate(prompts, params)
    stats = engine.take_round_stats()
    return sum(s.num_accepted_tokens for s in stats) / sum(s.num_draft_tokens for s in stats)


def test_sampled_acceptance_far_above_exact_match():
    target = tiny_model("llama", seed=3)
    draft = perturbed(target, scale=0.05, seed=1)
    rates = {m: acceptance(target, draft, m, 0.6) for m in ("exact", "rejection", "coupled")}
    print(f"acceptance at T=0.6 (accepted / drafted, depth 4, B=8): {rates}")
    assert rates["rejection"] > 2 * rates["exact"], rates
    assert rates["coupled"] > 2 * rates["exact"], rates


def test_logprobs_are_the_target_log_probabilities(pair):
    target, draft = pair
    prompts = mixed_prompts(3, seed=5)
    params = [
        SamplingParams(
            max_tokens=12, temperature=0.8, seed=1, acceptance="rejection", logprobs=True
        ),
        SamplingParams(max_tokens=12, temperature=0.0, logprobs=True),
        SamplingParams(max_tokens=12, temperature=1.1, seed=2, acceptance="coupled", logprobs=True),
    ]
    engine = Engine(target, drafter=ModelDrafter(draft), max_batch_size=3, draft_depth=4)
    for prompt, out in zip(prompts, engine.generate(prompts, params), strict=True):
        assert out.logprobs is not None and len(out.logprobs) == len(out.tokens)
        seq = mx.array([prompt + out.tokens[:-1]])
        logits = target(seq)[0, len(prompt) - 1 :]  # teacher-forced, one plain forward
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        want = np.array(mx.take_along_axis(logp, mx.array(out.tokens)[:, None], axis=-1))[:, 0]
        np.testing.assert_allclose(out.logprobs, want, atol=1e-4)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(temperature=-0.5), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(min_p=1.0), "min_p"),
        (dict(acceptance="speculative"), "acceptance"),
        (dict(seed="7"), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(repetition_penalty=float("nan")), "repetition_penalty"),
        (dict(presence_penalty=float("inf")), "presence_penalty"),
        (dict(temperature=float("inf")), "temperature"),
    ],
)
def test_bad_sampling_params_rejected_at_creation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)


def test_engine_keeps_serving_after_bad_params(pair):
    target, _ = pair
    engine = Engine(target, max_batch_size=2)
    with pytest.raises(ValueError, match="acceptance"):
        engine.add_request("bad", [1, 2], SamplingParams(acceptance="nope"))
    out = engine.generate([[1, 2]], SamplingParams(max_tokens=4, temperature=1.0, seed=3))
    assert len(out[0].tokens) == 4


@pytest.mark.parametrize("arch", ["qwen3_mtp", "qwen3_mtp_host", "qwen3_5"])
def test_coupled_identity_with_mtp_head_and_hybrid_target(arch):
    """The sampled path through the MTP drafter (qwen3 + head, its steps in MLX or on the
    host) and a GatedDeltaNet hybrid."""
    from tests.tiny import OracleDrafter, fit_mtp_head
    from workers.drafters.mtp import MTPDrafter
    from workers.drafters.mtp_host import HostMTPDrafter

    prompts = mixed_prompts(6, seed=4)
    params = [
        SamplingParams(
            max_tokens=14,
            temperature=[0.5, 0.8, 1.2][i % 3],
            top_p=0.9 if i % 2 else 1.0,
            seed=300 + i,
            acceptance="coupled",
            ignore_eos=True,
        )
        for i in range(6)
    ]
    if arch.startswith("qwen3_mtp"):
        target = tiny_model("qwen3", seed=3)
        kind = HostMTPDrafter if arch == "qwen3_mtp_host" else MTPDrafter
        drafter = kind(target, fit_mtp_head(target, steps=60))
    else:
        # Recurrent layers cannot be drafters; an oracle proposing the seeded continuation with
        # every third draft corrupted makes the hybrid target roll back per row.
        target = tiny_model("qwen3_5", seed=3, layers=4)
    refs = [plain(target, [p], [sp], 1)[0] for p, sp in zip(prompts, params, strict=True)]
    if arch == "qwen3_5":
        drafter = OracleDrafter({tuple(p): r for p, r in zip(prompts, refs, strict=True)})
    engine = Engine(target, drafter=drafter, max_batch_size=6, draft_depth=3)
    spec = [o.tokens for o in engine.generate(prompts, params)]
    stats = engine.take_round_stats()
    assert 0 < sum(s.num_accepted_tokens for s in stats) < sum(s.num_draft_tokens for s in stats)
    for i in range(6):
        assert spec[i] == refs[i], f"{arch} row {i}"
