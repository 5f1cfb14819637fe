"""Where one-token steps attend by row length (workers/attention_cuda.py, MLX CUDA).

The CUDA kernel itself runs only on a GPU (bench/ragged_attention.py checks it against MLX's
masked attention there). Here the backend is made to look like MLX CUDA and the kernel is
replaced by the same semantics in MLX ops (window query i of row r attends slots
[0, lengths[r] + i]), so these tests check the routing: which calls are sent to the kernel,
with which lengths, keys and values. Outputs are compared with mlx-lm's own greedy decode.
"""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams, attention_cuda, skinny_linear
from workers.backend import Backend
from workers.drafters.mtp import MTPDrafter

MAX_TOKENS = 16


def by_length(q: mx.array, k: mx.array, v: mx.array, lengths: mx.array, scale: float) -> mx.array:
    """The kernel's contract in MLX ops: [B, Hq, W, D] attending slots [0, lengths[r] + i]."""
    W, S = q.shape[2], k.shape[2]
    slot = mx.arange(S)[None, None, None, :]
    last = (lengths[:, None] + mx.arange(W)[None])[:, None, :, None]
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=slot <= last)


@pytest.fixture
def cuda_like(monkeypatch):
    """Backend reports MLX CUDA; the kernel is `by_length`, counted, and serves the tiny fp32
    models' steps as `serves` would serve half-precision ones (tested on its own below); every
    model module's attention function is restored afterwards."""
    calls: list[tuple[int, ...]] = []

    def kernel(q, k, v, lengths, scale):  # type: ignore[no-untyped-def]
        calls.append(tuple(q.shape))
        return by_length(q, k, v, lengths, scale)

    monkeypatch.setattr(Backend, "current", classmethod(lambda cls: cls(True, False)))
    monkeypatch.setattr(attention_cuda, "ragged_window_attention", kernel)
    wide = attention_cuda.WIDE_MAX_SLOTS
    monkeypatch.setattr(
        attention_cuda,
        "serves",
        lambda q, k, sinks: q.shape[2] == 1 or (q.shape[2] <= 8 and k.shape[2] <= wide),
    )
    for name in ("qwen3", "gemma3_text"):
        module = sys.modules.get(f"mlx_lm.models.{name}")
        if module is not None:
            fn = module.scaled_dot_product_attention
            monkeypatch.setattr(module, "scaled_dot_product_attention", fn)
    return calls


def test_ragged_one_token_steps_attend_by_length_and_match_mlx_lm(cuda_like):
    """A batch of ragged rows, decoded plainly, and with an MTP head whose depth cap changes
    round by round (2, 0, 0, 3, 0, 1, ...): a plain round right after a drafting one runs while
    the host knows only upper bounds of the rows' lengths, so the kernel must read the device's
    exact ones. One-token steps go to the kernel (a lone row's too while its host length is a
    bound), and windows of a few tokens over short contexts; the tokens are mlx-lm's."""
    from workers.depth_policy import DepthPolicy

    schedule = [2, 0, 0, 3, 0, 1, 0, 0]

    class Scheduled(DepthPolicy):
        def choose(self, batch_size: int) -> int:
            return schedule[self._rounds % len(schedule)]

    target = tiny_model("qwen3", seed=5)
    head = fit_mtp_head(target, steps=40)
    prompts = mixed_prompts(3, seed=11, lengths=[5, 23, 12])
    refs = [reference_greedy(target, p, MAX_TOKENS) for p in prompts]
    for drafter in (None, MTPDrafter(target, head)):
        cuda_like.clear()
        engine = Engine(
            target, drafter=drafter, max_batch_size=3, draft_depth=3, adaptive_depth=True
        )
        if drafter is not None:
            engine.depth_policy = Scheduled(3)
        outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        for o, ref in zip(outs, refs):
            assert_matches(o.tokens, ref, f"routed attention, drafter {drafter}")
        assert cuda_like, "no step was routed to the kernel"
        assert any(shape[0] > 1 and shape[2] == 1 for shape in cuda_like), cuda_like
        if drafter is None:
            assert all(shape[2] == 1 for shape in cuda_like), cuda_like
        else:  # verify windows and the head's steps, over short contexts
            assert any(shape[2] > 1 for shape in cuda_like), cuda_like


def test_sliding_window_layers_never_take_the_kernel(cuda_like):
    """The kernel knows no window: a model with sliding-window layers keeps the masked path."""
    target = tiny_model("gemma3_text", seed=2)
    prompts = mixed_prompts(2, seed=3, lengths=[9, 30])
    outs = Engine(target, max_batch_size=2).generate(prompts, SamplingParams(max_tokens=12))
    for p, o in zip(prompts, outs):
        assert_matches(o.tokens, reference_greedy(target, p, 12), "gemma3, sliding window")
    assert not cuda_like, cuda_like


def test_the_kernel_serves_half_precision_steps_of_lane_sized_heads_where_it_is_faster():
    def ask(
        W: int = 1,
        D: int = 128,
        dtype=mx.bfloat16,
        hq: int = 32,
        hk: int = 8,
        S: int = 40,
        B: int = 2,
    ) -> bool:
        q, k = mx.zeros((B, hq, W, D), dtype), mx.zeros((B, hk, S, D), dtype)
        return attention_cuda.serves(q, k, None)

    wide = attention_cuda.WIDE_MAX_SLOTS
    assert ask() and ask(D=64) and ask(dtype=mx.float16) and ask(hq=8) and ask(S=4 * wide)
    assert ask(W=5) and ask(W=8, S=wide)
    assert ask(W=8, S=wide, B=64) and not ask(W=9)
    # past WIDE_MAX_SLOTS while the key reads stay few (no span builds there): the trained
    # hybrid's 8 heads of 64 at B=16, 32 heads of 128 at B=1, not at B=8 (the kernel lost)
    assert ask(W=4, hq=8, hk=2, D=64, S=1024, B=16) and not ask(W=4, hq=8, hk=2, D=64, S=1152)
    assert ask(W=5, S=1024, B=1) and not ask(W=5, S=wide + 128, B=8)
    assert not ask(D=80) and not ask(dtype=mx.float32) and not ask(hq=12)
    q = mx.zeros((2, 32, 1, 128), mx.bfloat16)
    assert not attention_cuda.serves(q, mx.zeros((2, 8, 40, 128), mx.bfloat16), mx.zeros(32))


@pytest.mark.skipif(not skinny_linear.available(), reason="the kernel runs on MLX CUDA only")
@pytest.mark.parametrize(
    "num_warps,D,dtype",
    [(1, 128, mx.bfloat16), (4, 128, mx.bfloat16), (13, 128, mx.bfloat16),
     (None, 128, mx.bfloat16), (None, 64, mx.float16), (None, 256, mx.bfloat16)],
)  # fmt: skip
def test_the_kernel_matches_masked_fp32_attention_at_every_block_shape(num_warps, D, dtype):
    """Every warps-a-block setting (attention_cuda.FEW_ROW_HEADS, capped by registers) computes
    what a masked fp32 attention does: ragged rows, windows of 1, 5 and 8, queries as the
    model's transposed view, keys and values as the cache hands them (rows and slots sliced
    from a longer buffer). Slots past a row's length hold inf values, so a read of one shows
    as inf or nan."""
    B, HQ, HK, S = 3, 8, 2, 70
    lengths = mx.array([60, 3, 33], dtype=mx.int32)
    for W in (1, 5, 8):
        mx.random.seed(W)
        q = mx.random.normal((B, W, HQ, D)).astype(dtype).transpose(0, 2, 1, 3)
        # the cache's parts: [rows + spare, Hk, slots + spare, D], sliced as `fetch` does
        kbuf, vbuf = (mx.random.normal((B + 2, HK, S + 30, D)).astype(dtype) for _ in range(2))
        last = mx.concatenate([lengths, mx.zeros(2, mx.int32)]) + W - 1  # query W-1's last slot
        unread = mx.arange(S + 30)[None, None, :, None] > last[:, None, None, None]
        k, v = kbuf[:B, :, :S], vbuf[:B, :, :S]
        poisoned = mx.where(unread, mx.inf, vbuf)[:B, :, :S]
        out = attention_cuda.ragged_window_attention(
            q, k, poisoned, lengths, D**-0.5, num_warps
        ).astype(mx.float32)
        f32 = [x.astype(mx.float32) for x in (q, k, v)]
        ref = by_length(*f32, lengths, D**-0.5)  # the kernel's contract, in fp32
        # half-precision output rounding: 2^-8 relative, plus a little for the inputs' rounding
        assert mx.all(mx.abs(out - ref) <= 1e-2 + 1e-2 * mx.abs(ref)).item(), (W, D)


@pytest.mark.skipif(not skinny_linear.available(), reason="the kernel runs on MLX CUDA only")
def test_a_window_query_attends_bit_for_bit_as_a_one_token_step_there_would():
    """Query i of a W-token window gives the bits a one-token step at length + i gives (the
    same warps): a row's verify attends as its decode steps would."""
    B, HQ, HK, D, S, W = 2, 8, 2, 128, 90, 5
    lengths = mx.array([70, 9], dtype=mx.int32)
    mx.random.seed(3)
    q = mx.random.normal((B, HQ, W, D)).astype(mx.bfloat16)
    k, v = (mx.random.normal((B, HK, S, D)).astype(mx.bfloat16) for _ in range(2))
    window = attention_cuda.ragged_window_attention(q, k, v, lengths, D**-0.5, 16)
    for i in range(W):
        step = attention_cuda.ragged_window_attention(
            q[:, :, i : i + 1], k, v, lengths + i, D**-0.5, 16
        )
        assert mx.array_equal(window[:, :, i : i + 1], step).item(), i


def test_warps_outside_a_block_or_its_registers_are_refused_before_any_launch():
    kv = mx.zeros((1, 2, 4, 128), mx.bfloat16)
    for W, warps in ((1, 33), (1, 0), (8, attention_cuda.warps_that_fit(8, 128) + 1)):
        q = mx.zeros((1, 8, W, 128), mx.bfloat16)
        with pytest.raises(ValueError, match="num_warps"):
            attention_cuda.ragged_window_attention(q, kv, kv, mx.array([1], mx.int32), 1.0, warps)
