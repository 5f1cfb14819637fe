"""Decode-step attention over the ragged cache on MLX CUDA, with each row's length instead of a
mask.

MLX CUDA's fused attention kernels refuse an array mask (vector kernel) or pay a fixed cost per
call (cuDNN), so a batch of ragged rows stepping one token each took MLX's unfused path:
score matmul, mask, softmax, value matmul. This kernel reads each row's length from the
device (`BatchCache.lengths_mx`) and attends slots [0, length_r + i] for window query i,
as the mask would. On an H200 (32 query heads, 8 KV heads, head dim 128, bf16) one call took
20.6 / 45.8 / 153.5 us at B=8 and contexts 128 / 1024 / 4096, against 44.1 / 110.3 / 308.8 us
masked, and 34.7 / 147 / 641 us against 122 / 314 / 1142 us at B=32. Windows of up to 8
tokens are routed here only while they read few slots or few keys in all (WIDE_MAX_SLOTS): the
first form of this kernel (a block per window query, keys re-read once per query) won at 5
queries up to 128 slots (B=1/8/32: 15 / 32 / 71 us against 32 / 42 / 93 masked) and lost from
1024 on (B=8: 165 against 91 us). Since stop 53 a block serves a (row, query head) and reads
each key once for the whole window. Inside a 6.6B verify forward (B=1, 5 queries, 128 slots,
Nsight Compute, H200) the attention went from 1,516 to 756 us, and the two copies around the
call (q made contiguous, out transposed back) went with it (169 us): the forward's kernels
from 7,924 to 6,997 us, against 5,396 for a decode step's. Launched alone, the two forms
taking turns at going first, one-token steps read 0.90-1.14 of the first form's time at B=1
and 8 (bench/results/s54/ section 2): level.
Per-call times of many independent calls in one graph read half of what Nsight Compute times
launch by launch (B=1, 5 queries, 133 slots: 14-17 against 26-36 us): calls that may overlap
hide the latency that a forward's calls, one after another, pay. So the warps a block gets
(FEW_ROW_HEADS) come from launches timed one at a time.

Routing: `install` replaces `scaled_dot_product_attention` in the modules of a model's
attention layers (mlx-lm imports it by name into each model file) with `route`, which sends
a `RaggedKVCache` step that `serves` accepts here and everything else to mlx-lm's own function
unchanged.
The cache still builds its mask, so a layer this module did not patch stays correct.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from workers.attention_route import route_attention
from workers.per_stream import compiled_call

# One block of NW warps per (row b, query head hq) for all W window queries: lanes split the head
# dim (E = D / 32 elements each), warps split the keys (warp w takes keys w, w + NW, ...), each
# key is read once for the W queries, each with its own online softmax (query i skips keys past
# its limit). Warps then meet through shared memory, C queries at a time (`_merged_at_once`),
# warp c merging query i0 + c over the NW warps in warp order. Per query the arithmetic and its order
# are those of a one-query block, so query i's output does not depend on W at equal NW: a row's
# verify window attends bit for bit as its decode steps would where both get the same warps
# (head dim 128: windows of up to 6, the default depth 4 included; wider ones get fewer warps
# by the register cap, `warps_that_fit`). q is read through its strides (the
# model's transposed view, no copy); out is [B, W, HQ, D], which the model's transpose back
# to [B, W, HQ * D] reads without a copy.
_SOURCE = r"""
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hq = blockIdx.x % HQ;
  const int b = blockIdx.x / HQ;
  const int hk = hq / (HQ / HK);
  const int base = lengths[b];  // query i sees keys [0, base + i]
  float qv[W][E], m[W], l[W], o[W][E];
  #pragma unroll
  for (int i = 0; i < W; ++i) {
    const T* qp = q + b * q_strides[0] + hq * q_strides[1] + i * q_strides[2];
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      qv[i][e] = static_cast<float>(qp[(lane * E + e) * q_strides[3]]) * scale[0];
      o[i][e] = 0.f;
    }
    m[i] = -INFINITY;
    l[i] = 0.f;
  }
  const T* kb = k + b * k_strides[0] + hk * k_strides[1] + lane * E;
  const T* vb = v + b * v_strides[0] + hk * v_strides[1] + lane * E;
  for (int j = warp; j <= base + W - 1; j += NW) {
    const T* kp = kb + j * k_strides[2];
    const T* vp = vb + j * v_strides[2];
    float kf[E], vf[E], s[W];
    #pragma unroll
    for (int e = 0; e < E; ++e) { kf[e] = static_cast<float>(kp[e]); vf[e] = static_cast<float>(vp[e]); }
    #pragma unroll
    for (int i = 0; i < W; ++i) {
      s[i] = 0.f;
      #pragma unroll
      for (int e = 0; e < E; ++e) s[i] += qv[i][e] * kf[e];
    }
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      #pragma unroll
      for (int i = 0; i < W; ++i) s[i] += __shfl_xor_sync(0xffffffff, s[i], off);
    }
    #pragma unroll
    for (int i = 0; i < W; ++i) {
      if (j > base + i) continue;
      const float m_new = fmaxf(m[i], s[i]);
      const float corr = __expf(m[i] - m_new), p = __expf(s[i] - m_new);
      l[i] = l[i] * corr + p;
      #pragma unroll
      for (int e = 0; e < E; ++e) o[i][e] = o[i][e] * corr + p * vf[e];
      m[i] = m_new;
    }
  }
  // so[c][w][e * 32 + lane] holds element lane * E + e: lanes touch consecutive words
  __shared__ float sm[W][NW], sl[W][NW], so[C][NW][D];
  if (lane == 0) {
    #pragma unroll
    for (int i = 0; i < W; ++i) { sm[i][warp] = m[i]; sl[i][warp] = l[i]; }
  }
  #pragma unroll
  for (int i0 = 0; i0 < W; i0 += C) {
    #pragma unroll
    for (int c = 0; c < C; ++c) {
      if (i0 + c < W) {
        #pragma unroll
        for (int e = 0; e < E; ++e) so[c][warp][e * 32 + lane] = o[i0 + c][e];
      }
    }
    __syncthreads();
    if (warp < C && i0 + warp < W) {
      const int i = i0 + warp;
      float M = -INFINITY;
      for (int w = 0; w < NW; ++w) M = fmaxf(M, sm[i][w]);
      float L = 0.f, acc[E];
      #pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = 0.f;
      for (int w = 0; w < NW; ++w) {
        const float c = sm[i][w] == -INFINITY ? 0.f : __expf(sm[i][w] - M);  // a warp with no keys
        L += sl[i][w] * c;
        #pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += so[warp][w][e * 32 + lane] * c;
      }
      T* op = out + (((size_t)b * W + i) * HQ + hq) * D + lane * E;
      #pragma unroll
      for (int e = 0; e < E; ++e) op[e] = static_cast<T>(acc[e] / L);
    }
    __syncthreads();
  }
"""
# Warps a block. Each warp walks its keys as a chain of dependent loads, so with few blocks the
# GPU idles on their latency: at B = 1, a 5-token window, 133 slots (6.6B shapes: 32 query
# heads of 128, 16 KV heads) one call took 57-60 us with 4 warps inside a verify forward
# (Nsight Compute, one H200) against 8.4 us for MLX's one-query kernel in the decode forward,
# and 47 with 16. Launches timed one at a time with caches flushed
# (bench/results/s52/device/window_warps_ncu.sh): 16 warps won at 160-1024 blocks (B = 1,
# W = 1 / 5: 14.6 / 27.9 against 30.5 / 36.4 us at 133 slots, 34.3 / 38.9 against 98.8 / 84.4
# at 512; B = 8, W = 1: 25.4 / 40.0 against 42.1 / 106.1); from 1280 on (B = 8, W = 5 / 8) 4
# won by 10-25%, but with caches as left 16 still won at W = 5. The 4 warps first chosen were
# timed as many independent calls in one graph, whose calls may overlap: that hides the
# latency a forward's calls, one after another, pay.
# The choice counts (row, query head) pairs, not blocks (those times the window), so a row's
# decode step and its verify window at one batch size split their keys alike. 16 warps go to
# B <= 8 at 32 query heads, where they were measured; B = 32 keeps 4 (one-token steps there,
# launched alone at 1024 slots: 126 us with 16 against 183; windows not measured).
FEW_ROW_HEADS = 256
FEW_ROW_HEADS_WARPS, NUM_WARPS = 16, 4
# A thread holds ~2 W E + 3 W + 2 E floats (queries, outputs, softmax state, a key and value
# row, W scores) and ~40 more registers: the warps a block gets are capped so a block's threads
# fit an SM's 64K registers (a launch asking for more fails). The estimate counts the W E terms
# 2.5 times: on an H200 (CUDA 13) head dim 256 with 8 queries failed to launch at 9 warps (more
# than 227 registers a thread, against 208 counted twice), and 7 queries launched at 10. A
# thread never holds more than 255, so 8 warps always fit. Stop 53 (H200, 6.6B shapes) read
# U keys loaded ahead of their first use as no faster in whole rounds (U = 4: 2.68 against
# 2.71 plain steps a forced 6.6B round at B = 1, slower at B = 8), so the loop loads one.
REGISTERS, THREAD_REGISTERS_MAX = 65536, 255


def warps_that_fit(W: int, D: int) -> int:
    """The most warps a block of this kernel may have for W window queries of head dim D."""
    E = D // 32
    per_thread = min(THREAD_REGISTERS_MAX, 5 * W * E // 2 + 3 * W + 2 * E + 40)
    return max(1, min(32, REGISTERS // (32 * per_thread)))


def _merged_at_once(W: int, NW: int, D: int) -> int:
    """Queries a block merges per pass (C in the source): their NW partial outputs fit 32 KB of
    shared memory, and each has a warp to merge it."""
    return max(1, min(8192 // (NW * D), W, NW))


# Windows of 2-8 tokens take the kernel over at most WIDE_MAX_SLOTS slots (it won at every
# size measured there), and up to WIDE_LONG_SLOTS while its key reads (rows x query heads x
# window x slots x head dim) stay under WIDE_MAX_READS: a block walks a row's keys alone, so
# past that the masked path's parallelism wins (32 query heads of 128 at 1152 slots: B=1,
# 23.6M reads, won 32 against 36 us; B=8, 189M, lost 165 against 91 us). Past WIDE_LONG_SLOTS
# it is not used: at 4224 slots even B=1 (86M) lost, 80 against 52 us. Every span the
# masked path reads is also a new shape for MLX CUDA to build, 50-100 ms a round (H200,
# trained hybrid, 8 query heads of 64: three to five such builds a 16-prompt job at B=8),
# which the kernel never pays. Re-timed for this form in stop 54 (calls chained as a forward's
# layers, bench/results/s54/ section 3): it wins at most shapes up to 256 slots and loses up
# to 1.5x (6.6B shapes, B=1) at 512-1024 slots where it is routed, about what the masked
# path's build for each new 128-slot span costs there: kept.
WIDE_MAX_SLOTS = 256
WIDE_LONG_SLOTS = 1024
WIDE_MAX_READS = 48 * 2**20
_kernel: Any = None
_scales: dict[float, mx.array] = {}  # one device scalar per softmax scale, not one per call
_compiled: dict[str, Any] = {}  # stream -> the compiled call (workers/per_stream.py)


def ragged_window_attention(
    q: mx.array,  # [B, Hq, W, D], RoPE applied
    k: mx.array,  # [B, Hk, S, D], may be a slice of a longer slot axis (last axis contiguous:
    # the cache's parts are built contiguous and sliced on rows and slots only)
    v: mx.array,  # [B, Hk, S, D]
    lengths: mx.array,  # [B] int32 (BatchCache.lengths_mx): row r's tokens before the window
    scale: float,
    num_warps: int | None = None,  # None: by row-heads (FEW_ROW_HEADS), capped; 1-warps_that_fit
) -> mx.array:
    """[B, Hq, W, D] (a transposed view of [B, W, Hq, D]): window query i of row r attends
    slots [0, lengths[r] + i]. At the default warps the call goes through `mx.compile`, traced
    once per shape and stream (workers/per_stream.py)."""
    if scale not in _scales:
        _scales[scale] = mx.array([scale], mx.float32)
    if num_warps is None:
        return compiled_call(_compiled, _launch)(q, k, v, lengths, _scales[scale])
    return _launch(q, k, v, lengths, _scales[scale], num_warps)


def _launch(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    lengths: mx.array,
    scale: mx.array,  # [1] float32
    num_warps: int | None = None,
) -> mx.array:
    B, HQ, W, D = q.shape
    few = B * HQ <= FEW_ROW_HEADS
    fit = warps_that_fit(W, D)
    NW = num_warps if num_warps is not None else min(fit, FEW_ROW_HEADS_WARPS if few else NUM_WARPS)
    if not 1 <= NW <= fit:
        raise ValueError(
            f"num_warps={NW} for a window of {W} and head dim {D}: pass 1-{fit}"
            " (a block's registers must fit an SM)"
        )
    global _kernel
    if _kernel is None:
        _kernel = mx.fast.cuda_kernel(
            name="ragged_window_attention",
            input_names=["q", "k", "v", "lengths", "scale"],
            output_names=["out"],
            source=_SOURCE,
            ensure_row_contiguous=False,  # q: the model's transposed view; k, v: the cache's slots
        )
    return _kernel(
        inputs=[q, k, v, lengths, scale],
        template=[
            ("T", q.dtype),
            ("W", W),
            ("HQ", HQ),
            ("HK", k.shape[1]),
            ("D", D),
            ("NW", NW),
            ("C", _merged_at_once(W, NW, D)),
        ],  # fmt: skip
        grid=(B * HQ * 32 * NW, 1, 1),
        threadgroup=(32 * NW, 1, 1),
        output_shapes=[(B, W, HQ, D)],
        output_dtypes=[q.dtype],
    )[0].transpose(0, 2, 1, 3)


def serves(q: mx.array, k: mx.array, sinks: object) -> bool:
    """A step this kernel computes, and faster than MLX: one token, or a window of up to 8
    over few slots or few key reads (WIDE_MAX_SLOTS, above); half precision; a head dim the
    lanes can split."""
    B, HQ, W, D = q.shape
    S = k.shape[2]
    short = S <= WIDE_MAX_SLOTS or (S <= WIDE_LONG_SLOTS and B * HQ * W * S * D <= WIDE_MAX_READS)
    return (
        (W == 1 or (W <= 8 and short))
        and sinks is None
        and q.dtype in (mx.bfloat16, mx.float16)
        and k.dtype == q.dtype
        and q.shape[-1] in (64, 128, 256)
        and q.shape[1] % k.shape[1] == 0
    )


def install(model: object) -> None:
    """Route the attention of `model`'s layers through `route` (once per model file)."""
    route_attention(model, _router, "_ragged_route")


def _router(original: Any) -> Any:
    from workers.kv_layers import RaggedKVCache

    def route(queries, keys, values, cache, scale, mask, sinks=None):  # type: ignore[no-untyped-def]
        if (
            type(cache) is RaggedKVCache
            and cache.owner.kernel_attention
            and isinstance(mask, mx.array)
            and serves(queries, keys, sinks)
            and values.shape[-1] == queries.shape[-1]  # the lanes split one head dim for both
        ):
            return ragged_window_attention(queries, keys, values, cache.owner.lengths_mx, scale)
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    return route
