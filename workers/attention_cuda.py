"""Decode-step attention over the ragged cache on MLX CUDA, with each row's length instead of a
mask.

MLX CUDA's fused attention kernels refuse an array mask (vector kernel) or pay a fixed cost per
call (cuDNN), so a batch of ragged rows stepping one token each took MLX's unfused path:
score matmul, mask, softmax, value matmul. This kernel reads each row's length from the
device (`BatchCache.lengths_mx`) and attends slots [0, length_r + i] for window query i,
as the mask would. On an H200 (32 query heads, 8 KV heads, head dim 128, bf16) one call took
20.6 / 45.8 / 153.5 us at B=8 and contexts 128 / 1024 / 4096, against 44.1 / 110.3 / 308.8 us
masked, and 34.7 / 147 / 641 us against 122 / 314 / 1142 us at B=32. A wider window re-reads
the keys once per query: at 5 queries it won up to 128 slots (B=1/8/32: 15 / 32 / 71 us
against 32 / 42 / 93 masked) and lost from 1024 on (B=8: 165 against 91 us), so windows of up
to 8 tokens are routed here only while they read few slots or few keys in all
(WIDE_MAX_SLOTS). (Grouping a KV head's query rows in one block, and splitting keys across
blocks, still lost at 5 queries from 1024 slots on: B=8 at 4096 slots 425-435 against 236 us.)
These per-call times are of many independent calls in one graph. For the same calls they read
half of what Nsight Compute times launch by launch (B=1, 5 queries, 133 slots: 14-17 against
26-36 us): calls that may overlap hide the latency that a forward's calls, one after another,
pay. So the warps a block gets (FEW_ROW_HEADS) come from launches timed one at a time.

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

# One block of NW warps per (row b, query head hq, window query i): lanes split the head dim
# (E = D / 32 elements each), warps split the keys (warp w takes keys w, w + NW, ...) with an
# online softmax each, then warp 0 merges the NW partial results through shared memory.
_SOURCE = r"""
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i = blockIdx.x % W;
  const int hq = (blockIdx.x / W) % HQ;
  const int b = blockIdx.x / (W * HQ);
  const int hk = hq / (HQ / HK);
  const int limit = lengths[b] + i;  // query i sees keys [0, limit]
  const T* qp = q + (((size_t)b * HQ + hq) * W + i) * D + lane * E;
  float qv[E];
  #pragma unroll
  for (int e = 0; e < E; ++e) qv[e] = static_cast<float>(qp[e]) * scale[0];
  const T* kb = k + b * k_strides[0] + hk * k_strides[1] + lane * E;
  const T* vb = v + b * v_strides[0] + hk * v_strides[1] + lane * E;
  float m = -INFINITY, l = 0.f, o[E];
  #pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.f;
  // U keys a trip, their loads issued before the first use: a walk over keys in HBM is a
  // chain of dependent loads otherwise. Keys past the limit read key 0 and are skipped.
  for (int j0 = warp; j0 <= limit; j0 += NW * U) {
    float s[U], vv[U][E];
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * NW <= limit ? j0 + u * NW : 0;
      const T* kp = kb + j * k_strides[2];
      const T* vp = vb + j * v_strides[2];
      s[u] = 0.f;
      #pragma unroll
      for (int e = 0; e < E; ++e) s[u] += qv[e] * static_cast<float>(kp[e]);
      #pragma unroll
      for (int e = 0; e < E; ++e) vv[u][e] = static_cast<float>(vp[e]);
    }
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      #pragma unroll
      for (int off = 16; off > 0; off >>= 1) s[u] += __shfl_xor_sync(0xffffffff, s[u], off);
    }
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u * NW > limit) break;
      const float m_new = fmaxf(m, s[u]);
      const float corr = __expf(m - m_new), p = __expf(s[u] - m_new);
      l = l * corr + p;
      #pragma unroll
      for (int e = 0; e < E; ++e) o[e] = o[e] * corr + p * vv[u][e];
      m = m_new;
    }
  }
  __shared__ float sm[NW], sl[NW], so[NW][D];
  if (lane == 0) { sm[warp] = m; sl[warp] = l; }
  #pragma unroll
  for (int e = 0; e < E; ++e) so[warp][lane * E + e] = o[e];
  __syncthreads();
  if (warp == 0) {
    float M = -INFINITY;
    for (int w = 0; w < NW; ++w) M = fmaxf(M, sm[w]);
    float L = 0.f, acc[E];
    #pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    for (int w = 0; w < NW; ++w) {
      const float c = sm[w] == -INFINITY ? 0.f : __expf(sm[w] - M);  // a warp with no keys
      L += sl[w] * c;
      #pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += so[w][lane * E + e] * c;
    }
    T* op = out + (((size_t)b * HQ + hq) * W + i) * D + lane * E;
    #pragma unroll
    for (int e = 0; e < E; ++e) op[e] = static_cast<T>(acc[e] / L);
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
# Keys a warp loads before it uses the first (U in the source). Inside the verify forward 4
# took 41.5 us a call against 47.4 for 1 (16 warps), but launched alone with caches flushed
# 20-35% longer: it stays 1 (the loop of the kernel before it) until a forward shows which.
UNROLL = 1
# Windows of 2-8 tokens take the kernel over at most WIDE_MAX_SLOTS slots (it won at every
# size measured there), and up to WIDE_LONG_SLOTS while its key reads (rows x query heads x
# window x slots x head dim) stay under WIDE_MAX_READS: a block walks a row's keys alone, so
# past that the masked path's parallelism wins (32 query heads of 128 at 1152 slots: B=1,
# 23.6M reads, won 32 against 36 us; B=8, 189M, lost 165 against 91 us). Past WIDE_LONG_SLOTS
# it is not used: at 4224 slots even B=1 (86M) lost, 80 against 52 us. Every span the
# masked path reads is also a new shape for MLX CUDA to build, 50-100 ms a round (H200,
# trained hybrid, 8 query heads of 64: three to five such builds a 16-prompt job at B=8),
# which the kernel never pays.
WIDE_MAX_SLOTS = 256
WIDE_LONG_SLOTS = 1024
WIDE_MAX_READS = 48 * 2**20
_kernel: Any = None
_scales: dict[float, mx.array] = {}  # one device scalar per softmax scale, not one per call


def ragged_window_attention(
    q: mx.array,  # [B, Hq, W, D], RoPE applied
    k: mx.array,  # [B, Hk, S, D], may be a slice of a longer slot axis
    v: mx.array,  # [B, Hk, S, D]
    lengths: mx.array,  # [B] int32 (BatchCache.lengths_mx): row r's tokens before the window
    scale: float,
    num_warps: int | None = None,  # None: by the call's row-heads (FEW_ROW_HEADS); 1-32
    unroll: int | None = None,  # keys a warp loads before it uses the first (None: UNROLL)
) -> mx.array:
    """[B, Hq, W, D]: window query i of row r attends slots [0, lengths[r] + i]."""
    B, HQ, W, D = q.shape
    few = B * HQ <= FEW_ROW_HEADS
    NW = num_warps if num_warps is not None else FEW_ROW_HEADS_WARPS if few else NUM_WARPS
    U = unroll if unroll is not None else UNROLL
    if not 1 <= NW <= 32 or U < 1:  # a block holds at most 1024 threads
        raise ValueError(f"num_warps={NW}, unroll={U}: pass 1-32 warps and unroll >= 1")
    global _kernel
    if _kernel is None:
        _kernel = mx.fast.cuda_kernel(
            name="ragged_window_attention",
            input_names=["q", "k", "v", "lengths", "scale"],
            output_names=["out"],
            source=_SOURCE,
            ensure_row_contiguous=False,  # k, v: strided views of the cache's slot axis
        )
    if scale not in _scales:
        _scales[scale] = mx.array([scale], mx.float32)
    return _kernel(
        inputs=[mx.contiguous(q), k, v, lengths, _scales[scale]],
        template=[
            ("T", q.dtype),
            ("W", W),
            ("HQ", HQ),
            ("HK", k.shape[1]),
            ("D", D),
            ("NW", NW),
            ("U", U),
        ],  # fmt: skip
        grid=(B * HQ * W * 32 * NW, 1, 1),
        threadgroup=(32 * NW, 1, 1),
        output_shapes=[q.shape],
        output_dtypes=[q.dtype],
    )[0]


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
        ):
            return ragged_window_attention(queries, keys, values, cache.owner.lengths_mx, scale)
        return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)

    return route
