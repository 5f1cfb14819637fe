"""The gated-delta recurrence of a window as one kernel, where the backend has one.

A GatedDeltaNet layer's state update is a loop over the window's positions. As MLX ops that is
about nine kernels per position, so a 5-token verify window costs ~45 launches per layer where a
1-token decode costs ~9: on a GPU, where a small model's step is bound by launches, that alone
made speculation on hybrid targets slower than plain decoding (issue 11, P5). mlx-lm runs the
loop inside one Metal kernel (`gated_delta_kernel`, with a per-position mask that leaves the
state unchanged); this module offers the same contract on CUDA (`mx.fast.cuda_kernel`, one warp
per state row, as the Metal kernel uses one SIMD group).

A verify must be able to keep any prefix of its window, and a fused kernel returns only the
final state. So workers/hybrid.py runs the window once for its outputs and, at commit, once
more from the state before it with the mask cut after each row's kept tokens: two launches per
layer whatever the depth, against one per decode step. Where no kernel exists (the CPU) the
ops loop stays: it matches mlx-lm's CPU path bit for bit and keeps every position's state.

    recurrence(q, k, v, g, beta, state, mask) -> (y, new_state)
    q, k [B, T, Hk, Dk] (normalised; Hk divides Hv), v [B, T, Hv, Dv], g, beta [B, T, Hv],
    state [B, Hv, Dv, Dk] float32, mask [B, T] bool (False: the position leaves the state as is)
"""

from __future__ import annotations

import os
from collections.abc import Callable

import mlx.core as mx

Recurrence = Callable[..., tuple[mx.array, mx.array]]

# "kernel" (default): fused where the backend has a kernel, the ops loop elsewhere; "ops": force
# the two-pass path with mlx-lm's ops loop as the recurrence (tests of the rerun logic on the
# CPU); "loop": never the two-pass path.
MODE_ENV = "SPECFLEET_GDN_RECURRENCE"


def window_recurrence(head_k_dim: int) -> Recurrence | None:
    """The fused recurrence for this backend and key width, or None (use the ops loop)."""
    mode = os.environ.get(MODE_ENV, "kernel")
    if mode == "ops":
        from mlx_lm.models.gated_delta import gated_delta_ops

        return gated_delta_ops
    if mode == "loop" or mx.default_device() != mx.gpu:
        return None
    if mx.metal.is_available() and head_k_dim % 32 == 0:  # mlx-lm's kernel: 32-lane groups
        from mlx_lm.models.gated_delta import gated_delta_kernel

        return gated_delta_kernel
    if mx.cuda.is_available():
        return cuda_recurrence
    return None


def kernel_inputs(
    recurrence: Recurrence, q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array
) -> tuple[mx.array, ...]:
    """(q, k, v, g, beta) as `recurrence` reads them. A verify window runs its kernel twice
    (workers/hybrid.py): casting here once, not in each call, saves a launch per layer."""
    if recurrence is cuda_recurrence:
        return q, k, v, g.astype(mx.float32), beta.astype(mx.float32)
    return q, k, v, g, beta


_CUDA_SOURCE = """
    // One warp per (row b, value head hv, value index dv): lane l holds state[dv, l*NPT :
    // (l+1)*NPT] (NPT = ceil(Dk / 32); lanes past Dk hold zeros and add nothing).
    constexpr int NPT = (Dk + 31) / 32;
    const int lane = threadIdx.x;
    const int dv = blockIdx.y * blockDim.y + threadIdx.y;
    const int n = blockIdx.z;  // b * Hv + hv
    if (dv >= Dv) return;      // whole warps only: x spans exactly one warp
    const int b = n / Hv, hv = n % Hv, hk = hv / (Hv / Hk);
    const InT* q_ = q + (size_t)b * T * Hk * Dk + hk * Dk + lane * NPT;
    const InT* k_ = k + (size_t)b * T * Hk * Dk + hk * Dk + lane * NPT;
    const InT* v_ = v + (size_t)b * T * Hv * Dv + hv * Dv + dv;
    InT* y_ = y + (size_t)b * T * Hv * Dv + hv * Dv + dv;
    const float* g_ = g + (size_t)b * T * Hv + hv;
    const float* beta_ = beta + (size_t)b * T * Hv + hv;
    const bool* mask_ = mask + (size_t)b * T;
    const float* s_in = state_in + ((size_t)n * Dv + dv) * Dk + lane * NPT;
    float* s_out = state_out + ((size_t)n * Dv + dv) * Dk + lane * NPT;
    const int live = min(NPT, max(0, Dk - lane * NPT));  // this lane's elements inside Dk
    float s[NPT];
    for (int i = 0; i < NPT; ++i) s[i] = i < live ? s_in[i] : 0.0f;
    for (int t = 0; t < T; ++t) {
      float out = 0.0f;
      if (mask_[t]) {
        const float decay = g_[t * Hv];
        float kv = 0.0f;
        for (int i = 0; i < live; ++i) {
          s[i] *= decay;
          kv += s[i] * static_cast<float>(k_[t * Hk * Dk + i]);
        }
        for (int o = 16; o > 0; o >>= 1) kv += __shfl_xor_sync(0xffffffff, kv, o);
        const float delta = (static_cast<float>(v_[t * Hv * Dv]) - kv) * beta_[t * Hv];
        for (int i = 0; i < live; ++i) {
          s[i] += static_cast<float>(k_[t * Hk * Dk + i]) * delta;
          out += s[i] * static_cast<float>(q_[t * Hk * Dk + i]);
        }
        for (int o = 16; o > 0; o >>= 1) out += __shfl_xor_sync(0xffffffff, out, o);
      }
      if (lane == 0) y_[t * Hv * Dv] = static_cast<InT>(out);
    }
    for (int i = 0; i < live; ++i) s_out[i] = s[i];
"""

_cuda_kernel: Callable[..., list[mx.array]] | None = None  # built on first use


def cuda_recurrence(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    g: mx.array,
    beta: mx.array,
    state: mx.array,
    mask: mx.array | None = None,
) -> tuple[mx.array, mx.array]:
    """The recurrence as one CUDA kernel (contract above); y at masked positions is 0."""
    global _cuda_kernel
    if _cuda_kernel is None:
        _cuda_kernel = mx.fast.cuda_kernel(  # type: ignore[assignment]
            name="specfleet_gated_delta",
            input_names=["q", "k", "v", "g", "beta", "state_in", "mask"],
            output_names=["y", "state_out"],
            source=_CUDA_SOURCE,
        )
    B, T, Hk, Dk = k.shape
    Hv, Dv = v.shape[2:]
    if mask is None:
        mask = mx.ones((B, T), dtype=mx.bool_)
    rows_per_block = 4
    kernel = _cuda_kernel
    assert kernel is not None
    y, new_state = kernel(
        inputs=[
            q,
            k,
            v,
            g.astype(mx.float32),
            beta.astype(mx.float32),
            state.astype(mx.float32),
            mask.astype(mx.bool_),
        ],
        # Sizes are template constants (a CUDA kernel takes array inputs only): one build per
        # window length and head shape.
        template=[("InT", q.dtype), ("T", T), ("Dk", Dk), ("Dv", Dv), ("Hk", Hk), ("Hv", Hv)],
        grid=(32, ((Dv + rows_per_block - 1) // rows_per_block) * rows_per_block, B * Hv),
        threadgroup=(32, rows_per_block, 1),
        output_shapes=[(B, T, Hv, Dv), (B, Hv, Dv, Dk)],
        output_dtypes=[q.dtype, mx.float32],
    )
    return y, new_state
