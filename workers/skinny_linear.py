"""Linear layers over 2-8 rows as one weight-streaming kernel (MLX CUDA), where cuBLASLt's GEMM
leaves most of the GPU idle.

A B=1 verify window of 5 tokens, or a decode step of 8 rows, multiplies a few rows by every
weight. MLX CUDA runs one row as its gemv and two or more as a cuBLASLt GEMM, whose tiles on
an output of at most a few thousand columns fill a fraction of the SMs: on an H200 a 5-row
[4096, 4096] bf16 matmul took 38.8 us against 15.6 for one row, and [2048, 4096] 32.4 against
11.9, while the wide MLP and lm_head weights streamed at 3+ TB/s either way
(bench/skinny_matmul.py, bench/results/skinny_matmul_deep_h200.json). This kernel reads each
weight row once for all rows of x: each warp owns R weight rows and issues all U * R of its
16-byte loads before the first FMA, so enough bytes are in flight to stream HBM; x comes through
L1. Only the weights where it measured faster take it: at most `WEIGHT_BYTES_MAX` (the attention
projections of a 1-8B model), above row_linear's small weights (workers/row_linear.py).

On by default on MLX CUDA (`SPECFLEET_SKINNY_LINEAR=0` turns it off). Per call it is 1.1-2.8x
faster on the weights it takes (H200), and most of its gain in a round is on the host: MLX's
2-8-row GEMM costs 13-27 us of host time to launch against 5-7 for this kernel. Whole engine
runs, in turns in one process (H200, random Qwen3 bf16, bench/results/s53/): forced depth-4
rounds at B = 1 were 6-16% faster with it (1.07x / 1.16x tokens/s at 6.6B / 0.87B in
bench.gpu's A/B, 0.94 / 0.91 of the round time in another run) and level at B = 8 and 32 (0.99-
1.05x). Earlier runs (bench/results/s27/) read less than the card's pass-to-pass spread. Each
(rows, weight shape) it meets compiles a kernel on first use, in every process (~2.2 s on an
H200; MLX 0.32 keeps custom kernels' builds in memory only): a serving worker's warm-up
(workers/warm_up.py builds every batch size and depth before traffic) pays that at startup,
not its first requests; an engine built without a warm-up pays it in its first few-row calls.

Each lane accumulates its k-slices in k order in fp32 and the lanes meet in a fixed shuffle tree,
so an output row's bits depend on its own x row and the weight alone, never on how many rows
share the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from workers import row_linear
from workers.backend import Backend
from workers.per_stream import compiled_call

ROWS_MIN, ROWS_MAX = 2, 8  # one row stays MLX's gemv (faster there); more than 8, its GEMM
WEIGHT_BYTES_MAX = 32 << 20  # [4096, 4096] bf16: the weights where the kernel's device time wins
# With WIDE_ENV=1: every weight up to this (a 6.6B's MLP down, 96 MiB; its stacked gate and up,
# 192 MiB, workers/stacked_linears.py) takes the kernel too, for the host's sake: a 5-row
# cuBLASLt GEMM costs ~35 us of MLX's encode a call against ~8-10 for the kernel
# (bench/results/s64/device/kernel_call_cost.py), and a 6.6B verify forward makes 97 of them,
# while the kernel streams wide weights about as fast as the GEMM (3+ TB/s, H200). Off by
# default: in two A/Bs in turns (H200, bench.gpu --ab-skinny-wide, bench/results/s64/) forced
# depth-4 rounds read 1.06 / 1.09x at 6.6B B = 1 but 0.96 / 0.87x at ~1B B = 1, and level at
# B = 8 (0.97-1.11x): no setting that wins everywhere.
WIDE_WEIGHT_BYTES_MAX = 1 << 30
# Unset or "1": install the route (MLX CUDA only; it never installs without CUDA). "0": not.
ENV = "SPECFLEET_SKINNY_LINEAR"
# "1": wide weights take the kernel (WIDE_WEIGHT_BYTES_MAX); unset or "0": not.
WIDE_ENV = "SPECFLEET_SKINNY_WIDE"

SOURCE = r"""
  constexpr int STEP = 256;  // k of one warp-wide 16-byte load (32 lanes x 8 elements)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = (blockIdx.x * NW + warp) * R;
  if (n0 >= N) return;
  const T* wr[R];
  #pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + (size_t)(n0 + r < N ? n0 + r : N - 1) * K;
  float acc[M][R];
  #pragma unroll
  for (int m = 0; m < M; ++m) {
    #pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;
  }
  int k = lane * 8;
  for (; k + (U - 1) * STEP < K; k += U * STEP) {
    uint4 wv[U][R];  // every load of the trip issued before the first use
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      #pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = *reinterpret_cast<const uint4*>(wr[r] + k + u * STEP);
    }
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      float wf[R][8];
      #pragma unroll
      for (int r = 0; r < R; ++r) {
        const T* h = reinterpret_cast<const T*>(&wv[u][r]);
        #pragma unroll
        for (int e = 0; e < 8; ++e) wf[r][e] = static_cast<float>(h[e]);
      }
      #pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + (size_t)m * K + k + u * STEP));
        const T* h = reinterpret_cast<const T*>(&raw);
        #pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float xv = static_cast<float>(h[e]);
          #pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] = fmaf(xv, wf[r][e], acc[m][r]);
        }
      }
    }
  }
  for (; k < K; k += STEP) {  // the tail: fewer than U loads left, in the same k order
    #pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 raw = *reinterpret_cast<const uint4*>(wr[r] + k);
      const T* hw = reinterpret_cast<const T*>(&raw);
      #pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 xr = __ldg(reinterpret_cast<const uint4*>(x + (size_t)m * K + k));
        const T* hx = reinterpret_cast<const T*>(&xr);
        #pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[m][r] = fmaf(static_cast<float>(hx[e]), static_cast<float>(hw[e]), acc[m][r]);
      }
    }
  }
  #pragma unroll
  for (int m = 0; m < M; ++m) {
    #pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[m][r];
      #pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
      acc[m][r] = s;
    }
  }
  #pragma unroll
  for (int m = 0; m < M; ++m) {  // lane m * R + r writes y[m, n0 + r]
    #pragma unroll
    for (int r = 0; r < R; ++r) {
      if (lane == (m * R + r) % 32 && n0 + r < N) y[(size_t)m * N + n0 + r] = static_cast<T>(acc[m][r]);
    }
  }
"""
WARPS = 8  # per block
_kernel: Any = None
_compiled: dict[str, Callable[[mx.array, mx.array], mx.array]] = {}


def tiling(M: int) -> tuple[int, int]:
    """(R weight rows per warp, U loads per row in flight) for M rows of x: at 5 rows R=4, U=2
    streamed the attention weights fastest, at 8 rows R=2, U=4 (H200, bench/skinny_matmul.py)."""
    return (4, 2) if M <= 5 else (2, 4)


def matmul(x: mx.array, w: mx.array, R: int | None = None, U: int | None = None) -> mx.array:
    """[M, N] = x [M, K] @ w [N, K].T in x's half precision, fp32 accumulation; K % 8 == 0.
    At the default tiling, through a trace per shape and stream (workers/per_stream.py)."""
    if R is None and U is None:
        return compiled_call(_compiled, _launch)(x, w)
    return _launch(x, w, R, U)


def _launch(x: mx.array, w: mx.array, R: int | None = None, U: int | None = None) -> mx.array:
    global _kernel
    if _kernel is None:
        _kernel = mx.fast.cuda_kernel(
            name="skinny_linear", input_names=["x", "w"], output_names=["y"], source=SOURCE
        )
    M, K = x.shape
    N = w.shape[0]
    dR, dU = tiling(M)
    R, U = R or dR, U or dU
    return _kernel(  # type: ignore[no-any-return]
        inputs=[x, w],
        template=[("T", x.dtype), ("M", M), ("N", N), ("K", K), ("R", R), ("U", U), ("NW", WARPS)],
        grid=(-(-N // (R * WARPS)) * 32 * WARPS, 1, 1),  # threads: one warp per R rows of w
        threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(M, N)],
        output_dtypes=[x.dtype],
    )[0]


class SkinnyLinear(nn.Linear):
    """nn.Linear without bias whose calls of ROWS_MIN..ROWS_MAX rows run the kernel."""

    def __call__(self, x: mx.array) -> mx.array:
        if not takes(x, self.weight):  # one row, more than 8, or x in another type than w
            return super().__call__(x)
        K = x.shape[-1]
        return matmul(x.reshape(-1, K), self.weight).reshape(*x.shape[:-1], -1)


def serves(module: object, wide: bool | None = None) -> bool:
    """A plain bias-free half-precision linear above row_linear's weights and within ours
    (`weight_bytes_max`; `wide` as there)."""
    if not isinstance(module, nn.Linear) or type(module) not in (nn.Linear, row_linear.ViewLinear):
        return False
    if "bias" in module:
        return False
    w = module.weight
    return (
        w.dtype in (mx.bfloat16, mx.float16)
        and row_linear.WEIGHT_BYTES_MAX < w.nbytes <= weight_bytes_max(wide)
        and w.shape[1] % 8 == 0  # whole 16-byte loads
    )


def wide_wanted() -> bool:
    """Wide weights take the kernel too (WIDE_ENV "1"; off by default on every backend)."""
    return Backend.current().wants(WIDE_ENV, default=False)


def weight_bytes_max(wide: bool | None = None) -> int:
    """The largest weight the route takes: WIDE_WEIGHT_BYTES_MAX where wide weights take the
    kernel (`wide`; None: `wide_wanted`), else WEIGHT_BYTES_MAX."""
    return WIDE_WEIGHT_BYTES_MAX if (wide_wanted() if wide is None else wide) else WEIGHT_BYTES_MAX


def takes(x: mx.array, w: mx.array) -> bool:
    """A call of x [..., K] on w [N, K] the kernel computes: 2-8 rows, one half-precision type,
    whole 16-byte loads (for a caller holding its own weight: workers/stacked_linears.py)."""
    K = x.shape[-1]
    return (
        ROWS_MIN <= x.size // max(K, 1) <= ROWS_MAX
        and x.dtype == w.dtype
        and w.dtype in (mx.bfloat16, mx.float16)
        and K % 8 == 0
    )


def available() -> bool:
    """The kernel runs here: MLX's CUDA backend is the default device."""
    return bool(mx.cuda.is_available()) and mx.default_device() == mx.gpu


def wanted() -> bool:
    """The engine installs the route: not turned off (`ENV`=0) and available (MLX CUDA)."""
    return Backend.current().wants(ENV) and available()


def install(model: object) -> int:
    """Route `model`'s linears that `serves` takes (MLX CUDA only); returns how many. Linears an
    earlier install routed past the bound that holds now (WIDE_ENV changed) go back first."""
    if not available():
        return 0
    bound = weight_bytes_max()
    row_linear.reclass(
        model,
        lambda m: type(m) is SkinnyLinear and m.weight.nbytes > bound,
        row_linear.engine_linear(),
    )
    return row_linear.reclass(model, serves, SkinnyLinear)


def remove(model: object) -> None:
    """Undo `install` (benchmarks compare both routes in one process)."""
    row_linear.reclass(model, lambda m: type(m) is SkinnyLinear, row_linear.engine_linear())
