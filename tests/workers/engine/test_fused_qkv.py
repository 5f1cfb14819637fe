"""Attention's q, k, v projections as one stacked matmul (workers/fused_qkv.py), forced on the
CPU: what it stacks, that the weights become views (no second copy), that a call on another x
or a replaced weight falls back to the layer's own matmul, and engines decoding as mlx-lm does."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from tests.tiny import OracleDrafter, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, fused_qkv, row_linear


class Attention(nn.Module):
    def __init__(self, dim: int, q: int, kv: int, bias: bool = False):
        super().__init__()
        self.q_proj = nn.Linear(dim, q, bias=bias)
        self.k_proj = nn.Linear(dim, kv, bias=bias)
        self.v_proj = nn.Linear(dim, kv, bias=bias)


@pytest.fixture
def no_size_floor(monkeypatch):
    """Tiny layers stack too (the route leaves stacks within row_linear's bound alone)."""
    monkeypatch.setattr(row_linear, "WEIGHT_BYTES_MAX", 0)


@pytest.mark.parametrize("bias", [False, True])
def test_the_three_outputs_are_the_separate_matmuls_and_weights_become_views(no_size_floor, bias):
    mx.random.seed(0)
    attn = Attention(64, 96, 32, bias)
    x = mx.random.normal((5, 64))
    before = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
    assert fused_qkv.install(attn) == 1
    assert type(attn.q_proj) is fused_qkv.FusedQ and type(attn.v_proj) is fused_qkv.FusedPart
    stack = attn.q_proj.__dict__["_qkv_stack"]
    assert stack.weight.shape == (96 + 32 + 32, 64)
    for part, name in enumerate(fused_qkv.NAMES):  # each weight is the stack's row slice
        assert attn[name]["weight"] is stack.views[part]
    after = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
    for a, b in zip(before, after):
        assert mx.allclose(a, b, atol=1e-5).item()
    assert attn.k_proj(x) is stack.last[1]  # k and v came from the stacked call, not their own
    assert fused_qkv.install(attn) == 1  # again: the same stack, no new copy
    assert attn.q_proj.__dict__["_qkv_stack"] is stack


def test_another_x_or_a_replaced_weight_runs_the_layers_own_matmul(no_size_floor):
    mx.random.seed(1)
    attn = Attention(64, 64, 32)
    fused_qkv.install(attn)
    x, other = mx.random.normal((3, 64)), mx.random.normal((3, 64))
    attn.q_proj(x)
    assert mx.allclose(attn.k_proj(other), other @ attn.k_proj.weight.T, atol=1e-5).item()
    new_v = mx.random.normal((32, 64))
    attn.v_proj.update({"weight": new_v})
    attn.q_proj(x)
    assert mx.allclose(attn.v_proj(x), x @ new_v.T, atol=1e-5).item()
    new_q = mx.random.normal((64, 64))
    attn.q_proj.update({"weight": new_q})
    assert mx.allclose(attn.q_proj(x), x @ new_q.T, atol=1e-5).item()


def test_only_plain_layers_of_one_dtype_and_width_with_the_same_bias_stack(no_size_floor):
    mixed_bias = Attention(64, 64, 32)
    mixed_bias.v_proj = nn.Linear(64, 32, bias=True)
    mixed_dtype = Attention(64, 64, 32)
    mixed_dtype.k_proj.set_dtype(mx.bfloat16)
    quantized = Attention(64, 64, 32)
    quantized.q_proj = nn.QuantizedLinear(64, 64, bias=False)
    for attn in (mixed_bias, mixed_dtype, quantized):
        assert fused_qkv.install(attn) == 0
        assert type(attn.k_proj) is not fused_qkv.FusedPart


def test_small_stacks_are_left_to_row_linear():
    attn = Attention(64, 64, 32)  # 32 KiB of fp32
    assert fused_qkv.install(attn) == 0


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen3_5"])
def test_engines_with_the_route_decode_like_mlx_lm(no_size_floor, monkeypatch, arch):
    """Forced on (as on MLX CUDA), plain and speculative engines (oracle drafts, windows of up
    to 4 tokens, 5 rows joining and leaving) match mlx-lm's own decode on the modules it built;
    qwen3_5 is the hybrid, whose full-attention layers project a gated q (twice its width)."""
    monkeypatch.setenv(fused_qkv.ENV, "1")
    model = tiny_model(arch, seed=5, layers=4)
    prompts = mixed_prompts(5, seed=6)
    refs = [reference_greedy(model, p, 16) for p in prompts]
    oracle = OracleDrafter({tuple(p): r[0] for p, r in zip(prompts, refs)})
    for drafter in (None, oracle):
        engine = Engine(model, drafter=drafter, max_batch_size=5, draft_depth=3)
        stacked = [m for _, m in model.named_modules() if type(m) is fused_qkv.FusedQ]
        assert stacked, "the engine must have installed the route"
        outs = engine.generate(prompts, SamplingParams(max_tokens=16))
        for i, (o, ref) in enumerate(zip(outs, refs)):
            assert_matches(o.tokens, ref, f"{arch}, drafter={drafter is not None}, row {i}")
    fused_qkv.remove(model)
    assert all(
        type(m) not in (fused_qkv.FusedQ, fused_qkv.FusedPart) for _, m in model.named_modules()
    )
