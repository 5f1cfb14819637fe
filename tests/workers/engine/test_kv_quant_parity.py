"""Quantized KV cache (kv_bits 8 and 4): speculative greedy == plain greedy of the same engine.

The reference is the engine itself without a drafter, one request at a time and one round at a
time (pipeline=False), with the same kv_bits: each committed position must be quantized once,
from the same key, whichever path wrote it. The speculative runs batch 8 requests through 3
rows (so requests join as others finish, at different max_tokens), with drafters whose accept
counts differ between rows and rounds; pipelined and synchronous rounds both.

Tokens must be equal, and so must their logprobs (to 1e-6; on the CPU they are bit-identical):
a cache that let a verify window attend to its own drafts' unquantized keys, while plain
decoding reads them quantized, keeps most greedy tokens but moves the logprobs (by ~3e-3 at 8
bits and ~8e-2 at 4 on these models), and fails here.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_map

from tests.tiny import fit_mtp_head, mixed_prompts, perturbed
from workers import Completion, Engine, ModelDrafter, NgramDrafter, SamplingParams, kv_quant
from workers.drafters.mtp import MTPDrafter

MAX_TOKENS = 24
LENGTHS = [1, 5, 17, 9, 33, 2, 12, 26]


def tiny32(arch: str, seed: int = 3):
    """tests.tiny.tiny_model's shapes with head_dim 32: mx.quantize groups are >= 32 numbers,
    and a group may not span two heads, so the head dim must hold whole groups."""
    common = dict(
        hidden_size=64,
        num_hidden_layers=2 if arch == "qwen3" else 4,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-5,
        vocab_size=256,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    mx.random.seed(seed)
    if arch == "qwen3":
        from mlx_lm.models import qwen3

        model = qwen3.Model(qwen3.ModelArgs(model_type="qwen3", rope_theta=1e4, **common))
    else:
        from mlx_lm.models import qwen3_5

        text = dict(
            common,
            model_type="qwen3_5",
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            full_attention_interval=2,
            rope_parameters={"type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
        )
        model = qwen3_5.Model(qwen3_5.ModelArgs(model_type="qwen3_5", text_config=text))
    model.update(tree_map(lambda p: p * 2.0 if p.ndim == 2 else p, model.parameters()))
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def setup(request):
    target = tiny32(request.param)
    head = fit_mtp_head(target, steps=60)
    prompts = mixed_prompts(8, seed=11, lengths=LENGTHS)
    return request.param, target, head, prompts, {}  # {(bits, packed reads): plain outputs}


def params_for(n: int) -> list[SamplingParams]:
    return [SamplingParams(max_tokens=MAX_TOKENS - 3 * (i % 4), logprobs=True) for i in range(n)]


def plain_alone(target, prompts, bits: int) -> list[Completion]:
    engine = Engine(target, max_batch_size=1, pipeline=False, kv_bits=bits, kv_group_size=32)
    return engine.generate(prompts, params_for(len(prompts)))


def reference(setup, bits: int) -> list[Completion]:
    """Plain decoding of the setup's prompts, computed once per setup (the fixture's dict)."""
    _, target, _, prompts, refs = setup
    key = (bits, kv_quant.packed_reads())
    if key not in refs:
        refs[key] = plain_alone(target, prompts, bits)
    return refs[key]


def make_drafter(name: str, target, head):
    if name == "ngram":
        return NgramDrafter()
    if name == "model":
        return ModelDrafter(perturbed(target, scale=0.35))
    if name == "mtp":
        return MTPDrafter(target, head)
    return None


CASES = [
    (None, True),
    (None, False),
    ("ngram", False),
    ("model", False),
    ("mtp", True),
    ("mtp", False),
]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(("drafter", "pipeline"), CASES)
def test_speculative_equals_plain_with_quantized_kv(setup, bits, drafter, pipeline):
    """Attention reads decoded float slots (the CPU path)."""
    check_parity(setup, bits, drafter, pipeline)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(("drafter", "pipeline"), [("model", False), ("mtp", True)])
def test_speculative_equals_plain_reading_packed_slots(setup, bits, drafter, pipeline, monkeypatch):
    """Attention reads packed slots with quantized matmuls (the GPU path), forced on the CPU."""
    monkeypatch.setattr(kv_quant, "packed_reads", lambda: True)
    check_parity(setup, bits, drafter, pipeline)


def check_parity(setup, bits: int, drafter: str | None, pipeline: bool) -> None:
    arch, target, head, prompts, _ = setup
    if drafter == "model" and arch == "qwen3_5":
        pytest.skip("a recurrent draft model cannot roll back (workers/kv_cache.py)")
    ref = reference(setup, bits)
    engine = Engine(
        target,
        drafter=make_drafter(drafter, target, head),
        max_batch_size=3,  # 8 requests through 3 rows: requests join as others finish
        draft_depth=4,
        pipeline=pipeline,
        kv_bits=bits,
        kv_group_size=32,
    )
    layer = engine.cache.layers[-1]
    assert layer.quant.bits == bits  # type: ignore[attr-defined]
    assert hasattr(layer, "bits") == kv_quant.packed_reads()  # mlx-lm reads packed slots
    outs = engine.generate(prompts, params_for(len(prompts)))
    for i, (o, r) in enumerate(zip(outs, ref)):
        label = f"{arch} {drafter} pipeline={pipeline} kv_bits={bits} row {i}"
        assert o.tokens == r.tokens, label
        assert np.allclose(o.logprobs, r.logprobs, rtol=0, atol=1e-6), label
    stats = engine.take_round_stats()
    assert max(s.batch_size for s in stats) == 3
    if drafter is not None:
        drafted = sum(s.num_draft_tokens for s in stats)
        accepted = sum(s.num_accepted_tokens for s in stats)
        assert 0 < drafted and accepted < drafted
        if drafter != "ngram":  # n-grams of random prompts are rarely right
            assert accepted > 0, "the drafter must agree sometimes"
            divergent = [s for s in stats if len(set(s.accepted_per_row)) > 1]
            assert len(divergent) >= 1, "rows' accept counts must differ within rounds"


def test_quantized_outputs_differ_from_unquantized_sometimes(setup):
    """The parity above is not vacuous: 4-bit keys change some greedy tokens of these tiny
    random models (so a cache that silently kept floats would fail here)."""
    _, target, _, prompts, _ = setup
    plain = Engine(target, max_batch_size=8).generate(prompts, params_for(len(prompts)))
    four = reference(setup, 4)
    assert any(o.tokens != r.tokens for o, r in zip(plain, four))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_prefix_cache_hits_restore_the_quantized_slots(setup, bits, drafter):
    """Prompts sharing a prefix with an earlier one take it from the prefix cache (copied
    packed slots, no forward): tokens and logprobs equal plain decoding without the cache."""
    arch, target, head, prompts, _ = setup
    if arch == "qwen3_5":
        pytest.skip("the prefix cache turns itself off for recurrent layers")
    shared = prompts[4][:24]  # 3 blocks of 8
    followers = [shared + p[:5] for p in prompts[:3]] + [shared]
    mtp = make_drafter(drafter, target, head)
    if isinstance(mtp, MTPDrafter):  # a window inside the shared prefix: the hits restore the
        mtp.prompt_window = 4  # hidden of block [16, 24), which the first prompt computed
    engine = Engine(
        target,
        drafter=mtp,
        max_batch_size=3,
        kv_bits=bits,
        kv_group_size=32,
        prefix_cache_tokens=4096,
        prefix_block_tokens=8,
    )
    sp = params_for(1)[0]
    first = engine.generate([shared + [7]], [sp])
    rest = engine.generate(followers, [sp] * len(followers))
    assert [o.num_cached_tokens for o in rest] == [24, 24, 24, 16]
    plain = Engine(target, max_batch_size=1, pipeline=False, kv_bits=bits, kv_group_size=32)
    ref = plain.generate([shared + [7], *followers], [sp] * (1 + len(followers)))
    for i, (o, r) in enumerate(zip(first + rest, ref)):
        assert o.tokens == r.tokens, f"{drafter} kv_bits={bits} prompt {i}"
        assert np.allclose(o.logprobs, r.logprobs, rtol=0, atol=1e-6), i
