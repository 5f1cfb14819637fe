"""The 2-8 row linear kernel route (workers/skinny_linear.py): which layers it takes, that it
never installs without CUDA, and on a CUDA machine its results against an fp32 reference."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from tests.tiny import tiny_model
from workers import Engine, skinny_linear


def _linear(n: int, k: int, dtype: mx.Dtype = mx.bfloat16, bias: bool = False) -> nn.Linear:
    layer = nn.Linear(k, n, bias=bias)
    layer.set_dtype(dtype)
    return layer


def test_only_mid_size_half_precision_bias_free_layers_are_served():
    mid = _linear(1024, 2048)  # 4 MiB of bf16: past row_linear's 2 MiB, within 32 MiB
    assert skinny_linear.serves(mid)
    assert not skinny_linear.serves(_linear(512, 1024))  # 1 MiB: row_linear's
    # 64 MiB: MLX's GEMM, unless wide weights take the kernel too (WIDE_ENV)
    assert not skinny_linear.serves(_linear(8192, 4096), wide=False)
    assert not skinny_linear.serves(_linear(1024, 2048, mx.float32))  # fp32
    assert not skinny_linear.serves(_linear(1024, 2048, bias=True))
    assert not skinny_linear.serves(_linear(1024, 2044))  # rows not whole 16-byte loads
    assert not skinny_linear.serves(nn.Embedding(2048, 1024))


def test_the_wide_route_takes_weights_up_to_its_own_bound():
    wide = _linear(8192, 4096)  # 64 MiB: a ~6B model's stacked q, k, v or its MLP's size
    assert skinny_linear.serves(wide, wide=True)
    assert skinny_linear.serves(_linear(1024, 2048), wide=True)  # the narrow route's still
    assert not skinny_linear.serves(_linear(512, 1024), wide=True)  # row_linear's still
    huge = _linear(8, 8)
    huge.weight = mx.zeros((40_000, 16_384), mx.bfloat16)  # 1.2 GiB (lazy: never allocated)
    assert not skinny_linear.serves(huge, wide=True)


def test_the_wide_bound_follows_the_environment(monkeypatch):
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "1")
    assert skinny_linear.weight_bytes_max() == skinny_linear.WIDE_WEIGHT_BYTES_MAX
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "0")
    assert skinny_linear.weight_bytes_max() == skinny_linear.WEIGHT_BYTES_MAX
    monkeypatch.delenv(skinny_linear.WIDE_ENV)  # off by default, on every backend
    assert skinny_linear.weight_bytes_max() == skinny_linear.WEIGHT_BYTES_MAX


def test_an_install_under_a_narrower_bound_gives_wide_layers_back(monkeypatch):
    """Engines sharing a model install in turns (a benchmark's A/B): a wide install routes the
    64 MiB layer, a narrow one after it returns that layer to the plain class and keeps the
    mid-size one routed."""
    monkeypatch.setattr(skinny_linear, "available", lambda: True)  # install only re-classes
    tree = nn.Sequential(_linear(8192, 4096), _linear(1024, 2048))
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "1")
    assert skinny_linear.install(tree) == 2
    assert [type(m) for m in tree.layers] == [skinny_linear.SkinnyLinear] * 2
    monkeypatch.setenv(skinny_linear.WIDE_ENV, "0")
    skinny_linear.install(tree)
    assert type(tree.layers[0]) is not skinny_linear.SkinnyLinear
    assert isinstance(tree.layers[0], nn.Linear)
    assert type(tree.layers[1]) is skinny_linear.SkinnyLinear


def test_calls_a_stack_may_hand_the_kernel():
    w = mx.zeros((64, 2048), mx.bfloat16)
    x = mx.zeros((1, 5, 2048), mx.bfloat16)
    assert skinny_linear.takes(x, w)
    assert skinny_linear.takes(mx.zeros((8, 2048), mx.bfloat16), w)
    assert not skinny_linear.takes(mx.zeros((1, 2048), mx.bfloat16), w)  # one row: MLX's gemv
    assert not skinny_linear.takes(mx.zeros((9, 2048), mx.bfloat16), w)
    assert not skinny_linear.takes(x.astype(mx.float32), w)
    assert not skinny_linear.takes(x.astype(mx.float32), w.astype(mx.float32))
    assert not skinny_linear.takes(
        mx.zeros((5, 2044), mx.bfloat16), mx.zeros((4, 2044), mx.bfloat16)
    )


def test_never_installs_without_cuda_even_when_asked(monkeypatch):
    monkeypatch.setenv(skinny_linear.ENV, "1")
    if skinny_linear.available():
        pytest.skip("this machine runs MLX CUDA: the route would install")
    tree = nn.Sequential(_linear(1024, 2048))
    assert not skinny_linear.wanted()
    assert skinny_linear.install(tree) == 0
    assert type(tree.layers[0]) is nn.Linear
    model = tiny_model("qwen3", seed=1)
    Engine(model, max_batch_size=2)
    assert all(type(m) is not skinny_linear.SkinnyLinear for _, m in model.named_modules())


def test_calls_the_kernel_cannot_take_run_the_plain_matmul():
    """One row, more than ROWS_MAX rows, or x in another dtype than the weight (the kernel reads
    both as one type) go to nn.Linear's matmul, with its result (on any backend)."""
    layer = _linear(1024, 2048)
    plain = _linear(1024, 2048)
    plain.update(layer.parameters())
    layer.__class__ = skinny_linear.SkinnyLinear
    mx.random.seed(3)
    for x in (
        mx.random.normal((1, 2048)).astype(mx.bfloat16),
        mx.random.normal((3, 3, 2048)).astype(mx.bfloat16),  # 9 rows
        mx.random.normal((4, 2048)),  # fp32 rows, bf16 weight
    ):
        assert mx.array_equal(layer(x), plain(x)).item()


@pytest.mark.skipif(not skinny_linear.available(), reason="the kernel runs on MLX CUDA only")
@pytest.mark.parametrize("M", [2, 5, 8])
@pytest.mark.parametrize("shape", [(1024, 2048), (2048, 4096), (1000, 520)])
def test_kernel_matches_fp32_reference_and_each_row_is_the_one_row_call(M, shape):
    N, K = shape
    mx.random.seed(M)
    w = (mx.random.normal((N, K)) * 0.02).astype(mx.bfloat16)
    x = mx.random.normal((M, K)).astype(mx.bfloat16)
    y = skinny_linear.matmul(x, w)
    ref = x.astype(mx.float32) @ w.astype(mx.float32).T
    mlx_err = mx.abs((x @ w.T).astype(mx.float32) - ref).max().item()
    assert mx.abs(y.astype(mx.float32) - ref).max().item() <= 2 * mlx_err + 1e-6
    for m in range(M):  # batch invariance: a row's bits do not depend on the others
        alone = skinny_linear.matmul(mx.concatenate([x[m : m + 1]] * 2), w)[:1]
        assert mx.array_equal(y[m : m + 1], alone).item()


def test_backend_wants_reads_the_environment_before_its_default(monkeypatch):
    """Backend.wants: "1" / "0" in the environment decide; unset, the route's own default, or
    where it has none, whether the backend builds a graph per shape (MLX CUDA)."""
    from workers.backend import Backend

    cpu, cuda = Backend(False, True), Backend(True, False)
    monkeypatch.delenv(skinny_linear.ENV, raising=False)
    assert not cpu.wants(skinny_linear.ENV) and cuda.wants(skinny_linear.ENV)
    assert not cuda.wants(skinny_linear.ENV, default=False)  # a route off by default stays off
    monkeypatch.setenv(skinny_linear.ENV, "1")
    assert cpu.wants(skinny_linear.ENV, default=False)
    monkeypatch.setenv(skinny_linear.ENV, "0")
    assert not cuda.wants(skinny_linear.ENV)


def test_the_route_is_wanted_by_default_on_mlx_cuda_and_off_when_turned_off(monkeypatch):
    """On by default where MLX CUDA runs it (stop 53: B=1 rounds 6-16% faster on an H200);
    SPECFLEET_SKINNY_LINEAR=0 turns it off; never wanted where it cannot run."""
    from workers.backend import Backend

    monkeypatch.delenv(skinny_linear.ENV, raising=False)
    monkeypatch.setattr(Backend, "current", classmethod(lambda cls: cls(True, False)))
    monkeypatch.setattr(skinny_linear, "available", lambda: True)
    assert skinny_linear.wanted()
    monkeypatch.setenv(skinny_linear.ENV, "0")
    assert not skinny_linear.wanted()
    monkeypatch.setenv(skinny_linear.ENV, "1")
    monkeypatch.setattr(skinny_linear, "available", lambda: False)
    assert not skinny_linear.wanted()
