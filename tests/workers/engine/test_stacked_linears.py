"""Linears reading one input as one stacked matmul (workers/stacked_linears.py: q, k, v; gate,
up), forced on the CPU: what it stacks, that the weights become views (no second copy held),
that any member may come first, that the outputs are let go once every member took its part,
that a replaced weight runs the layer's own matmul (and is stacked again at the next install),
which models get no stacks, and engines decoding as mlx-lm does."""

from __future__ import annotations

import gc

import mlx.core as mx
import mlx.nn as nn
import pytest

from tests.tiny import OracleDrafter, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, row_linear, stacked_linears

QKV = stacked_linears.GROUPS[0]


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
def test_the_outputs_are_the_separate_matmuls_and_weights_become_views(no_size_floor, bias):
    mx.random.seed(0)
    attn = Attention(64, 96, 32, bias)
    x = mx.random.normal((5, 64))
    before = [attn[name](x) for name in QKV]
    assert stacked_linears.install(attn) == 1
    assert all(type(attn[name]) is stacked_linears.StackedLinear for name in QKV)
    stack = attn.q_proj.__dict__["_stack"]
    assert stack.weight.shape == (96 + 32 + 32, 64)
    for part, name in enumerate(QKV):  # each weight is the stack's row slice
        assert attn[name]["weight"] is stack.views[part]
    q = attn.q_proj(x)
    kept = stack.last
    assert kept is not None and kept[0] is x
    k = attn.k_proj(x)
    assert k is kept[1][1]  # k came from the stacked call, not a matmul of its own
    v = attn.v_proj(x)
    assert stack.last is None  # every member took its part: the outputs are let go
    for a, b in zip(before, (q, k, v)):
        assert mx.allclose(a, b, atol=1e-5).item()
    assert stacked_linears.install(attn) == 1  # again: the same stack, no new copy
    assert attn.q_proj.__dict__["_stack"] is stack
    stacked_linears.remove(attn)
    assert type(attn.q_proj) is row_linear.engine_linear()
    assert stacked_linears.install(attn) == 1  # removed, then installed: still the same stack
    assert attn.v_proj.__dict__["_stack"] is stack


def test_any_member_may_come_first_and_the_stack_runs_once_per_x(no_size_floor):
    mx.random.seed(4)
    attn = Attention(64, 64, 32)
    stacked_linears.install(attn)
    stack = attn.q_proj.__dict__["_stack"]
    x = mx.random.normal((2, 64))
    v = attn.v_proj(x)  # v first: the stacked call, its v columns
    first = stack.last
    q = attn.q_proj(x)
    assert stack.last is first and q is first[1][0]  # no second stacked call
    k = attn.k_proj(x)
    assert k is first[1][1] and stack.last is None
    for y, name in ((q, "q_proj"), (k, "k_proj"), (v, "v_proj")):
        assert mx.allclose(y, x @ attn[name].weight.T, atol=1e-5).item()


def test_an_mlps_gate_and_up_stack(no_size_floor):
    """The second group: mlx-lm's MLP calls gate_proj(x) and up_proj(x) on one x."""
    from mlx_lm.models.qwen3 import MLP

    mx.random.seed(5)
    mlp = MLP(64, 160)
    x = mx.random.normal((3, 64))
    before = mlp(x)
    assert stacked_linears.install(mlp) == 1
    assert type(mlp.gate_proj) is stacked_linears.StackedLinear
    assert type(mlp.down_proj) is nn.Linear  # reads another input
    assert mlp.gate_proj.__dict__["_stack"].weight.shape == (320, 64)
    assert mx.allclose(mlp(x), before, atol=1e-5).item()


def test_a_replaced_weight_runs_its_own_matmul_until_the_next_install_stacks_it(no_size_floor):
    mx.random.seed(1)
    attn = Attention(64, 64, 32)
    stacked_linears.install(attn)
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
    old = attn.k_proj.__dict__["_stack"]
    assert stacked_linears.install(attn) == 1  # a new stack of the weights as they are now
    stack = attn.k_proj.__dict__["_stack"]
    assert stack is not old and all(stack.holds(attn[n], i) for i, n in enumerate(QKV))
    assert mx.allclose(attn.v_proj(x), x @ new_v.T, atol=1e-5).item()
    assert mx.allclose(attn.q_proj(x), x @ new_q.T, atol=1e-5).item()


def test_no_second_copy_of_the_weights_is_held():
    """8 MiB of fp32 weights: past row_linear's bound; a kept copy would add 8 MiB."""
    mx.random.seed(6)
    attn = Attention(1024, 1024, 512)
    mx.eval(attn.parameters())
    gc.collect()
    before = mx.get_active_memory()
    assert stacked_linears.install(attn) == 1
    gc.collect()
    assert mx.get_active_memory() - before < 1 << 20


def test_mlx_lm_built_modules_have_no_stacks_and_compiled_heads_get_none(
    no_size_floor, monkeypatch
):
    """The reference decode (workers/routes.as_mlx_lm_built) runs mlx-lm's own linears; an MTP
    head whose steps compile gets no stacks (its trace lends stand-in weights, which no stack
    holds), while the target it drafts for does."""
    from mlx_lm.models.qwen3 import MLP

    from tests.tiny import fit_mtp_head
    from workers.compiled_step import COMPILE_ENV
    from workers.drafters.mtp import MTPDrafter
    from workers.routes import as_mlx_lm_built

    monkeypatch.setenv(stacked_linears.ENV, "1")
    monkeypatch.setenv(COMPILE_ENV, "1")
    model = tiny_model("qwen3", seed=7, layers=2)
    head = fit_mtp_head(model, steps=1)
    Engine(model, drafter=MTPDrafter(model, head), max_batch_size=2, draft_depth=2)
    in_target = [m for _, m in model.named_modules() if type(m) is stacked_linears.StackedLinear]
    assert len(in_target) == 2 * 5
    assert all(type(m) is not stacked_linears.StackedLinear for _, m in head.named_modules())
    with as_mlx_lm_built(model):
        assert all(type(m) is not stacked_linears.StackedLinear for _, m in model.named_modules())
    assert type(model.layers[0].mlp) is MLP and type(model.layers[0].mlp.up_proj) is (
        stacked_linears.StackedLinear
    )


def test_only_plain_layers_of_one_dtype_and_width_with_the_same_bias_stack(no_size_floor):
    mixed_bias = Attention(64, 64, 32)
    mixed_bias.v_proj = nn.Linear(64, 32, bias=True)
    mixed_dtype = Attention(64, 64, 32)
    mixed_dtype.k_proj.set_dtype(mx.bfloat16)
    quantized = Attention(64, 64, 32)
    quantized.q_proj = nn.QuantizedLinear(64, 64, bias=False)
    for attn in (mixed_bias, mixed_dtype, quantized):
        assert stacked_linears.install(attn) == 0
        assert type(attn.k_proj) is not stacked_linears.StackedLinear


def test_small_stacks_are_left_to_row_linear():
    attn = Attention(64, 64, 32)  # 32 KiB of fp32
    assert stacked_linears.install(attn) == 0


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen3_5"])
def test_engines_with_the_route_decode_like_mlx_lm(no_size_floor, monkeypatch, arch):
    """Forced on (as on MLX CUDA), plain and speculative engines (oracle drafts, windows of up
    to 4 tokens, 5 rows joining and leaving) match mlx-lm's own decode on the modules it built;
    qwen3_5 is the hybrid, whose full-attention layers project a gated q (twice its width)."""
    monkeypatch.setenv(stacked_linears.ENV, "1")
    model = tiny_model(arch, seed=5, layers=4)
    prompts = mixed_prompts(5, seed=6)
    refs = [reference_greedy(model, p, 16) for p in prompts]
    oracle = OracleDrafter({tuple(p): r[0] for p, r in zip(prompts, refs)})
    for drafter in (None, oracle):
        engine = Engine(model, drafter=drafter, max_batch_size=5, draft_depth=3)
        stacked = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                   if type(m) is stacked_linears.StackedLinear}  # fmt: skip
        assert stacked == {*QKV, "gate_proj", "up_proj"}, "the engine must have stacked both"
        outs = engine.generate(prompts, SamplingParams(max_tokens=16))
        for i, (o, ref) in enumerate(zip(outs, refs)):
            assert_matches(o.tokens, ref, f"{arch}, drafter={drafter is not None}, row {i}")
    stacked_linears.remove(model)
    assert all(type(m) is not stacked_linears.StackedLinear for _, m in model.named_modules())


def test_few_row_calls_take_the_skinny_kernel_where_its_wide_route_is_on(
    no_size_floor, monkeypatch
):
    """Where skinny_linear's wide route is wanted at install, a stack's 2-8-row calls go to the
    kernel (its call costs MLX's encode a quarter of a GEMM's); one row, bias stacks and an
    install with the route off keep the matmul. The kernel runs on MLX CUDA only, so a
    recording stand-in computes it here: the test is about which calls reach it."""
    from workers import skinny_linear

    calls = []

    def kernel(x, w):
        calls.append(x.shape)
        return x @ w.T

    monkeypatch.setattr(skinny_linear, "wanted", lambda: True)
    monkeypatch.setattr(skinny_linear, "matmul", kernel)
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "1")
    mx.random.seed(4)
    attn = Attention(64, 96, 32)
    attn.set_dtype(mx.bfloat16)
    x5 = mx.random.normal((1, 5, 64)).astype(mx.bfloat16)
    before = [attn[name](x5) for name in QKV]
    stacked_linears.install(attn)
    assert attn.q_proj.__dict__["_stack"].skinny
    after = [attn[name](x5) for name in QKV]
    assert calls == [(5, 64)]  # one call for the three members, rows flattened
    for a, b in zip(before, after):
        assert a.shape == b.shape and mx.allclose(a, b, atol=1e-2).item()
    attn.q_proj(x5[:, :1])  # one row: MLX's gemv
    assert len(calls) == 1
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "0")
    stacked_linears.install(attn)
    assert not attn.q_proj.__dict__["_stack"].skinny
    attn.q_proj(mx.random.normal((1, 5, 64)).astype(mx.bfloat16))
    assert len(calls) == 1
    biased = Attention(64, 96, 32, bias=True)
    biased.set_dtype(mx.bfloat16)
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "1")
    stacked_linears.install(biased)
    biased.q_proj(x5)
    assert len(calls) == 1  # the kernel adds no bias
