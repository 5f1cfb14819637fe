"""workers/cpu_ops.py: the CPU routes compute MLX's own fallbacks bit for bit, with fewer nodes."""

from __future__ import annotations

import io
import re
import threading

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from tests.tiny import reference_greedy, tiny_model
from workers import Engine, SamplingParams, cpu_ops
from workers.routes import as_mlx_lm_built, mlx_lm_classes
from workers.row_linear import ViewEmbedding, ViewLinear


def nodes(*arrays: mx.array) -> int:
    """Primitive nodes in the unevaluated graph behind `arrays`."""
    buf = io.StringIO()
    mx.export_to_dot(buf, *arrays)
    return len(re.findall(r"shape=rectangle", buf.getvalue()))


def routed(module: nn.Module) -> nn.Module:
    module.__class__ = cpu_ops.ROUTES[type(module)]
    return module


@pytest.mark.parametrize("dims, head_dim", [(64, 64), (16, 64)])  # full and partial rotary
@pytest.mark.parametrize("B, N, T", [(1, 4, 1), (3, 2, 5), (2, 8, 17)])
def test_rope_equals_mlx_bit_for_bit(dims, head_dim, B, N, T):
    mx.random.seed(B * 100 + T)
    ref = nn.RoPE(dims, base=1e6)
    new = routed(nn.RoPE(dims, base=1e6))
    x = mx.random.normal((B, N, T, head_dim)) * 3
    offsets = [0, 37, mx.array(np.arange(B, dtype=np.int32) * 7 + 3), mx.array([5])]
    for offset in offsets:
        want = ref(x, offset=offset)
        assert mx.array_equal(new(x, offset=offset), want).item()
        assert mx.array_equal(new(x, offset=offset), want).item()  # the tables reused


def test_rope_tables_follow_a_new_offset():
    """Each forward passes a new offset array: tables made for the last one must not be read."""
    ref, new = nn.RoPE(32), routed(nn.RoPE(32))
    x = mx.random.normal((2, 2, 3, 32))
    for start in (0, 11, 11, 250):
        offset = mx.array([start, start + 4])  # a new object each time, equal values at 11
        assert mx.array_equal(new(x, offset=offset), ref(x, offset=offset)).item()
        assert mx.array_equal(new(x, offset=start), ref(x, offset=start)).item()


def test_rope_tables_are_per_thread():
    """Two engines' forwards on two threads must not read each other's tables."""
    ref, new = nn.RoPE(32), routed(nn.RoPE(32))
    x = mx.random.normal((1, 2, 2, 32))
    mx.eval(x)
    failures: list[int] = []

    def run(start: int) -> None:
        for i in range(40):
            offset = mx.array([start + i])
            if not mx.array_equal(new(x, offset=offset), ref(x, offset=offset)).item():
                failures.append(start + i)

    threads = [threading.Thread(target=run, args=(s,)) for s in (0, 1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_rope_keeps_mlx_path_for_other_inputs():
    new = routed(nn.RoPE(32, traditional=True))
    x = mx.random.normal((1, 2, 3, 32))
    assert mx.array_equal(new(x, offset=4), nn.RoPE(32, traditional=True)(x, offset=4)).item()
    half = routed(nn.RoPE(32))
    xb = x.astype(mx.bfloat16)
    assert mx.array_equal(half(xb, offset=4), nn.RoPE(32)(xb, offset=4)).item()


@pytest.mark.parametrize("shape", [(1, 1, 256), (4, 5, 256), (2, 3, 4, 64)])
def test_rms_norm_equals_mlx_bit_for_bit(shape):
    ref = nn.RMSNorm(shape[-1], eps=1e-6)
    ref.weight = mx.random.normal((shape[-1],))
    new = routed(nn.RMSNorm(shape[-1], eps=1e-6))
    new.weight = ref.weight
    x = mx.random.normal(shape) * 5
    for _ in range(2):  # the second call reads the kept broadcasts
        assert mx.array_equal(new(x), ref(x)).item()
    new.weight = ref.weight = ref.weight * 2  # a replaced weight gets its own broadcast
    assert mx.array_equal(new(x), ref(x)).item()


@pytest.mark.parametrize("bias", [False, True])
def test_linear_equals_mlx_bit_for_bit(bias):
    ref = nn.Linear(64, 96, bias=bias)
    new = nn.Linear(64, 96, bias=bias)
    new.__class__ = ViewLinear  # every backend's linears (workers/row_linear.py)
    new.update(ref.parameters())
    x = mx.random.normal((3, 2, 64))
    for _ in range(2):
        assert mx.array_equal(new(x), ref(x)).item()
    ref.weight = new.weight = mx.random.normal((96, 64))  # a loaded weight replaces the view
    assert mx.array_equal(new(x), ref(x)).item()


def test_tied_head_equals_mlx_bit_for_bit():
    ref = nn.Embedding(50, 32)
    new = nn.Embedding(50, 32)
    new.weight = ref.weight
    new.__class__ = ViewEmbedding
    x = mx.random.normal((2, 3, 32))
    for _ in range(2):
        assert mx.array_equal(new.as_linear(x), ref.as_linear(x)).item()
    assert mx.array_equal(new(mx.array([[1, 7]])), ref(mx.array([[1, 7]]))).item()


def test_routes_build_fewer_nodes():
    x = mx.random.normal((1, 4, 1, 64))
    offset = mx.array([9])
    rope = routed(nn.RoPE(64))
    mx.eval(x, offset, rope(x, offset=offset))
    assert nodes(rope(x, offset=offset)) < nodes(mx.fast.rope(x, 64, traditional=False, base=1e4,
                                                               scale=1.0, offset=offset)) / 3  # fmt: skip
    h = mx.random.normal((1, 1, 64))
    norm = routed(nn.RMSNorm(64))
    mx.eval(h, norm.parameters(), norm(h))
    assert nodes(norm(h)) < nodes(mx.fast.rms_norm(h, norm.weight, 1e-5))


def test_engine_installs_them_on_the_cpu_and_decodes_like_mlx_lm():
    """The engine routes the model on the CPU; its greedy rows equal mlx-lm's own decode run on
    the same model with the routes undone."""
    model = tiny_model("qwen3")
    prompts = [[3, 9, 4, 1, 7], [5, 2, 8]]
    engine = Engine(model, None, max_batch_size=2)
    kinds = {type(m) for _, m in model.named_modules()}
    assert set(cpu_ops.ROUTES.values()) | {ViewLinear, ViewEmbedding} <= kinds
    import mlx_lm.models.qwen3 as family

    assert (
        engine.cache.cpu_attention and "_cpu_route" in family.scaled_dot_product_attention._routes
    )
    outs = engine.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    with as_mlx_lm_built(model):  # reference_greedy undoes them too; checked here
        assert not any(type(m) in mlx_lm_classes() for _, m in model.named_modules())
    for prompt, out in zip(prompts, outs):
        assert list(out.tokens) == reference_greedy(model, prompt, 12)[0]


def test_switch_off_keeps_mlx_modules(monkeypatch):
    monkeypatch.setenv(cpu_ops.ENV, "0")
    model = tiny_model("qwen3")
    Engine(model, None, max_batch_size=1)
    assert not any(type(m) in cpu_ops.ROUTES.values() for _, m in model.named_modules())


@pytest.mark.parametrize("Hq, Hk", [(4, 2), (4, 4)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("L, S", [(4, 9), (6, 200)])  # MLX's softmax; the split one
def test_attention_equals_mlx_bit_for_bit(Hq, Hk, masked, L, S):
    B, D = 3, 16
    lengths = mx.array([5, 2, 0])
    mask = None
    if masked:  # a ragged window's mask, one object for every layer of the forward
        slot, query = mx.arange(S)[None, None, None, :], mx.arange(L)[None, None, :, None]
        mask = slot <= lengths[:, None, None, None] + query  # [B, 1, L, S]
    for layer in range(3):
        q, k, v = (mx.random.normal((B, H, n, D)) for H, n in ((Hq, L), (Hk, S), (Hk, S)))
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=D**-0.5, mask=mask)
        assert mx.array_equal(cpu_ops.attention(q, k, v, D**-0.5, mask), want).item(), layer
    if masked:  # the next forward's mask: the kept broadcast must not be read
        mask = mx.logical_not(mask)
        mask[..., 0] = True
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=D**-0.5, mask=mask)
        assert mx.array_equal(cpu_ops.attention(q, k, v, D**-0.5, mask), want).item()


@pytest.mark.parametrize(
    "shape", [(1, 2, 2, 6, 2048), (1, 4, 6, 777), (3, 2, 2, 1, 4096), (16, 4, 120, 120),
              (1, 4, 64, 1500), (2, 1, 1, 2048)],
)  # fmt: skip
def test_softmax_equals_mlxs_bit_for_bit(shape):
    """The split softmax (max, compiled exp, sum, reciprocal) against mx.softmax(precise=True)
    at every scale of scores, with masked keys (float32's lowest, as attention fills them) and
    a fully masked row: the same bits."""
    assert np.prod(shape) >= cpu_ops.SOFTMAX_SPLIT_ELEMENTS  # the split route runs
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    lowest = np.finfo(np.float32).min
    for scale in (0.05, 1.0, 8.0, 60.0):
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        a = np.where(rng.random(shape) < 0.3, lowest, a)
        a.reshape(-1, shape[-1])[0] = lowest
        x = mx.array(a)
        got, want = np.array(cpu_ops.softmax(x)), np.array(mx.softmax(x, axis=-1, precise=True))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (shape, scale)


def test_softmax_traces_its_exponentials_once_for_every_shape():
    """A decode step's keys grow by one: the compiled exponentials must not be traced (and kept)
    once per shape, or a serving engine would trace every step and keep every trace."""
    cpu_ops.softmax(mx.ones((1, 2, 2, 1, 2048)))
    before = cpu_ops._traces
    for S in range(2048, 2060):
        for shape in ((1, 2, 2, 1, S), (3, 4, 6, S)):
            mx.eval(cpu_ops.softmax(mx.random.normal(shape)))
    assert cpu_ops._traces == before


def test_two_attention_routes_installed_in_turns_wrap_once_each():
    """Engines re-install routes at every admission: the chain must not grow."""
    import sys
    import types

    from workers.attention_route import route_attention

    family = types.ModuleType("fake_family")
    family.scaled_dot_product_attention = lambda *a, **k: "mlx-lm"  # type: ignore[attr-defined]
    Attn = type("Attn", (), {"__module__": "fake_family"})
    model = types.SimpleNamespace(layers=[types.SimpleNamespace(self_attn=Attn())])
    sys.modules["fake_family"] = family
    try:
        for _ in range(5):
            for marker in ("_cpu_route", "_ragged_route"):
                route_attention(model, lambda original: lambda *a, **k: original(*a, **k), marker)
        depth, fn = 0, family.scaled_dot_product_attention
        while getattr(fn, "_routes", None):
            depth += 1
            fn = fn.__closure__[0].cell_contents  # the function it wraps
        assert depth == 2 and fn() == "mlx-lm"
    finally:
        del sys.modules["fake_family"]
