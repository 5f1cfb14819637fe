"""Quantized targets and drafts (QuantizedLinear / QuantizedEmbedding, as mlx-community ships
them and `specfleet convert` writes them) through every engine path: plain, n-gram, draft model,
MTP head. The parity rule is against mlx-lm's own decode of the same quantized model.

Models stay tiny: MLX's CPU quantized matmuls are ~40x slower than fp32 ones.
"""

from __future__ import annotations

import copy
import logging

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from tests.tiny import fit_mtp_head, mixed_prompts, perturbed, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, ModelDrafter, NgramDrafter, SamplingParams
from workers.drafters.mtp import MTPDrafter
from workers.loading import quantized_layers, upcast_on_cpu

MAX_TOKENS = 16


def quantized(model, bits: int, group_size: int = 32):
    q = copy.deepcopy(model)
    nn.quantize(q, group_size=group_size, bits=bits)
    mx.eval(q.parameters())
    return q


# (arch, bits, group size): GGUF-like 4-bit groups of 32; mlx-community's 8-bit groups of 64.
CASES = {"llama-q4g32": ("llama", 4, 32), "qwen3-q8g64": ("qwen3", 8, 64)}


@pytest.fixture(scope="module", params=list(CASES))
def setup(request):
    return _build(*CASES[request.param])


@pytest.fixture(scope="module")
def qwen3_setup():
    """The tiny MTP head follows the qwen3 layout."""
    return _build(*CASES["qwen3-q8g64"])


def _build(arch: str, bits: int, group: int):
    float_target = tiny_model(arch, seed=3)
    target = quantized(float_target, bits, group)
    draft = quantized(perturbed(float_target, scale=0.35), bits, group)
    assert len(quantized_layers(target)) == 15  # 2 layers x 7 linears + the embedding
    prompts = mixed_prompts(4, seed=11)
    refs = [reference_greedy(target, p, MAX_TOKENS) for p in prompts]
    return arch, target, draft, prompts, refs


def _check(engine: Engine, prompts, refs, label: str) -> None:
    outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    for i, (o, ref) in enumerate(zip(outs, refs)):
        assert_matches(o.tokens, ref, f"{label} row {i}")


def test_plain(setup):
    _, target, _, prompts, refs = setup
    for bs in (1, 4):
        _check(Engine(target, max_batch_size=bs), prompts, refs, f"plain B={bs}")


def test_quantized_draft_model(setup):
    _, target, draft, prompts, refs = setup
    for bs in (1, 4):
        engine = Engine(target, drafter=ModelDrafter(draft), max_batch_size=bs, draft_depth=3)
        _check(engine, prompts, refs, f"draft B={bs}")
        stats = engine.take_round_stats()
        drafted = sum(s.num_draft_tokens for s in stats)
        accepted = sum(s.num_accepted_tokens for s in stats)
        assert 0 < accepted < drafted, "the quantized draft must agree sometimes, not always"


def test_ngram(setup):
    _, target, _, prompts, refs = setup
    engine = Engine(target, drafter=NgramDrafter(), max_batch_size=4, draft_depth=3)
    _check(engine, prompts, refs, "ngram")


def test_mtp_head_on_a_quantized_target(qwen3_setup):
    _, target, _, prompts, refs = qwen3_setup
    head = fit_mtp_head(target, steps=60, lr=3e-3)
    engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=4, draft_depth=3)
    _check(engine, prompts, refs, "mtp")
    assert sum(s.num_accepted_tokens for s in engine.take_round_stats()) > 0


def test_mtp_head_loaded_beside_a_quantized_target_keeps_float_weights(qwen3_setup, tmp_path):
    arch, target, _, _, _ = qwen3_setup
    from tests.tiny import make_tiny_tokenizer, save_tiny_checkpoint

    float_target = tiny_model(arch, seed=3)
    save_tiny_checkpoint(
        float_target, make_tiny_tokenizer(), tmp_path, mtp_head=fit_mtp_head(float_target, 5)
    )
    drafter = MTPDrafter.from_target(target, tmp_path)
    dtypes = {v.dtype for _, v in tree_flatten(drafter.head.parameters())}
    assert dtypes <= {mx.float16, mx.bfloat16, mx.float32}, dtypes


def test_cpu_load_dequantizes_exactly_and_logs(setup, caplog):
    """upcast_on_cpu (Engine.load's CPU step) swaps every quantized layer for an fp32 one
    holding the same values; keep_quantized=True leaves them quantized."""
    _, target, _, prompts, refs = setup
    assert mx.default_device() == mx.cpu
    kept = upcast_on_cpu(copy.deepcopy(target), keep_quantized=True)
    assert len(quantized_layers(kept)) == 15
    with caplog.at_level(logging.INFO, logger="workers.loading"):
        plain = upcast_on_cpu(copy.deepcopy(target))
    assert "dequantized 15 quantized layers to float32" in caplog.text
    assert not quantized_layers(plain)
    assert {v.dtype for _, v in tree_flatten(plain.parameters())} == {mx.float32}
    for name, m in quantized_layers(target):
        want = mx.dequantize(
            m.weight, m.scales.astype(mx.float32), m.biases.astype(mx.float32), m.group_size, m.bits
        )
        got = dict(tree_flatten(plain.parameters()))[f"{name}.weight"]
        assert mx.array_equal(got, want), name
    _check(Engine(plain, max_batch_size=4), prompts, refs, "dequantized at load")
