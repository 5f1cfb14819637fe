"""GPU experiment: skinny-M matmul kernels of our own against MLX's matmul, per call and in
whole forwards. The first two lost; the third is workers/skinny_linear.py (on by default
on MLX CUDA since stop 53).

    python -m bench.skinny_matmul --out F.json [--variants 4x4,2x4,8x4] [--rows 1,2,5,8,40]

The idea: a B=1 verify of 5 tokens cost 1.5-1.8x a decode step on an H200, and MLX CUDA takes
a gemv at 1 row but a GEMM from 2 rows on. A kernel that streams each weight row once for up to
8 rows of x (fp32 accumulation, each lane's 8-element slices in k order, then a fixed shuffle
tree) would make a verify cost about a decode step, and be batch-invariant: row m's bits do not
depend on the other rows.

1. Per call, on the ~1B and ~6B Qwen3 presets' weight shapes (bench/gpu.py), bf16: time of
   y = x @ W.T for M rows, MLX against the kernel (rows per warp x warps per block variants),
   cycling through enough copies of W that none stays in L2 (as a model's layers do); the
   largest difference from an fp32 reference, MLX's beside the kernel's; and whether row 0 of
   an M-row call equals the 1-row call bit for bit (batch invariance).
2. Whole forwards of the random presets through the engine's ragged cache: a decode step
   (W=1) and a verify window (W=5) at B=1 and 8, the kernel route on against off, medians of
   interleaved passes.

What it showed (H200, bench/results/skinny_matmul_h200.json): batch invariance held at every
shape, but with weights streamed from memory MLX's GEMM at 5-8 rows costs only 1.2-1.5x its
gemv (6.6B layer's seven weights: 310 us at M=1, 469 us at M=5), and the kernel was no faster
at M=5 (470 us) and slower at M=8 and on 12288-wide rows; whole forwards were 22-37% slower
with the route on at W=1. The tensor-core variant (bench/results/skinny_matmul_tc_h200.json)
was exact and batch-invariant too, won some small shapes at 5-8 rows (1b k/v 2.6x, 1b down at
8 rows 2.2x) but lost the large ones (6b lm_head 0.65-0.78x, down 0.76-0.94x) and every shape
at 1 row (0.65-0.89x): it streams at ~1.7 TB/s where MLX's kernels reach ~2.6; whole forwards
were slower with it at W=1 (0.60-0.65x) and even at W=5 (0.92-1.00x). Closing that needs a
deeper load pipeline (cp.async, more bytes in flight per lane), not attempted.

The deep-load kernel ('dRuU', workers/skinny_linear.py, stop 27) issues every load of a trip
before its first FMA. With `--timing queued` (64 calls per evaluation: the device's time, not
a sync per call; bench/results/s27/skinny_matmul_deep_h200.json, H200) it beat MLX at 2-8 rows
on every weight of at most 32 MiB (6.6B q/o 1.1-1.9x, k/v 1.2-2.1x; 1B all four 1.2-2.8x, except
gate/up at 2 rows, 0.81x) and lost on the 96 MiB MLP weights and the lm_head (0.55-0.97x) and at
one row everywhere (0.57-1.01x): MLX's gemv streams the wide weights at 3+ TB/s. So the engine's
route (SPECFLEET_SKINNY_LINEAR=0 turns it off) takes 2-8 rows on weights of at most 32 MiB only.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from bench.forward_timing import (
    forward_cells,
    streamed_weights,
    time_calls,
    time_forward,
    time_forward_pipelined,
    time_queued,
)
from workers import skinny_linear

# Block of NW warps; warp w owns R consecutive weight rows (outputs n0 .. n0 + R - 1) and the
# block's chunk of up to 8 rows of x (grid axis x). Each lane reads 8 contiguous elements
# (16 bytes) of every owned weight row per step of 256, converts them once and multiplies them
# into all rows of the chunk; the 32 lanes' partial sums then meet in a shuffle tree.
_SOURCE = r"""
  constexpr int MC = M < 8 ? M : 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m0 = blockIdx.x * MC;
  const int n0 = (blockIdx.y * NW + warp) * R;
  if (n0 >= N) return;
  float acc[MC][R];
  #pragma unroll
  for (int m = 0; m < MC; ++m) {
    #pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;
  }
  #pragma unroll 2
  for (int k = lane * 8; k < K; k += 256) {
    float wf[R][8];
    #pragma unroll
    for (int r = 0; r < R; ++r) {
      if (n0 + r < N) {
        const uint4 raw = *reinterpret_cast<const uint4*>(w + (size_t)(n0 + r) * K + k);
        const T* h = reinterpret_cast<const T*>(&raw);
        #pragma unroll
        for (int e = 0; e < 8; ++e) wf[r][e] = static_cast<float>(h[e]);
      } else {
        #pragma unroll
        for (int e = 0; e < 8; ++e) wf[r][e] = 0.f;
      }
    }
    #pragma unroll
    for (int m = 0; m < MC; ++m) {
      if (m0 + m < M) {
        const uint4 raw = *reinterpret_cast<const uint4*>(x + (size_t)(m0 + m) * K + k);
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
  #pragma unroll
  for (int m = 0; m < MC; ++m) {
    #pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[m][r];
      #pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
      acc[m][r] = s;
    }
  }
  if (lane == 0) {
    #pragma unroll
    for (int m = 0; m < MC; ++m) {
      #pragma unroll
      for (int r = 0; r < R; ++r) {
        if (m0 + m < M && n0 + r < N) y[(size_t)(m0 + m) * N + n0 + r] = static_cast<T>(acc[m][r]);
      }
    }
  }
"""
MAX_ROWS = 8  # rows of x the forwards send to the kernel (0: MLX's matmul throughout)
ROWS_PER_WARP = 4
WARPS = 4
_kernel: Any = None


def skinny_matmul(
    x: mx.array,  # [M, K], half precision, M <= MAX_ROWS in the engine's use
    w: mx.array,  # [N, K], the same dtype (an nn.Linear weight)
    rows_per_warp: int | None = None,
    warps: int | None = None,
) -> mx.array:
    """[M, N] = x @ w.T, fp32 accumulation, each weight row read once per 8 rows of x."""
    global _kernel
    if _kernel is None:
        _kernel = mx.fast.cuda_kernel(
            name="skinny_matmul", input_names=["x", "w"], output_names=["y"], source=_SOURCE
        )
    R = rows_per_warp or ROWS_PER_WARP
    NW = warps or WARPS
    M, K = x.shape
    N = w.shape[0]
    chunks = -(-M // 8)
    blocks = -(-N // (R * NW))
    return _kernel(
        inputs=[x, w],
        template=[("T", x.dtype), ("M", M), ("N", N), ("K", K), ("R", R), ("NW", NW)],
        grid=(chunks * 32 * NW, blocks, 1),
        threadgroup=(32 * NW, 1, 1),
        output_shapes=[(M, N)],
        output_dtypes=[x.dtype],
    )[0]


# The tensor-core variant ("tcS"): a block of S warps owns a 16-row tile of W and one chunk of 8
# rows of x (the mma's n); warp w sums k over [w K/S, (w+1) K/S), then warp 0 adds the S partial
# tiles in order. Per 32 k each lane loads 16 bytes of W row g and of row g + 8 (g = lane / 4)
# and 16 bytes of x row g: two m16n8k16 bf16 mma. The mma's 16 logical k of lane (g, c = lane % 4)
# are {2c, 2c+1, 2c+8, 2c+9}; they are mapped to the physical k 8c + {0..3} (first mma) and
# 8c + {4..7} (second), the same map for W and x, so each lane's loads are contiguous.
_TC_HEADER = r"""
#define SKINNY_MMA(d, a0, a1, a2, a3, b0, b1) asm volatile( \
  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
  "{%8,%9}, {%0,%1,%2,%3};\n" \
  : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
  : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
"""
_TC_SOURCE = r"""
  constexpr int KS = K / S;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int r0 = blockIdx.y * 16, m0 = blockIdx.x * 8;
  const bool has_x = m0 + g < M;
  const size_t k0 = (size_t)warp * KS + c * 8;
  const uint4* wa = reinterpret_cast<const uint4*>(w + (size_t)(r0 + g) * K + k0);
  const uint4* wb = reinterpret_cast<const uint4*>(w + (size_t)(r0 + g + 8) * K + k0);
  const uint4* xp = reinterpret_cast<const uint4*>(x + (size_t)(has_x ? m0 + g : 0) * K + k0);
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  #pragma unroll 4
  for (int i = 0; i < KS / 32; ++i) {
    const uint4 a = wa[i * 4];
    const uint4 b = wb[i * 4];
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (has_x) v = xp[i * 4];
    SKINNY_MMA(d, a.x, b.x, a.y, b.y, v.x, v.y);
    SKINNY_MMA(d, a.z, b.z, a.w, b.w, v.z, v.w);
  }
  __shared__ float part[S][32][4];
  #pragma unroll
  for (int j = 0; j < 4; ++j) part[warp][lane][j] = d[j];
  __syncthreads();
  if (warp == 0) {
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int u = 0; u < S; ++u) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) s[j] += part[u][lane][j];
    }
    const int n0 = m0 + 2 * c, n1 = n0 + 1;  // C fragment: rows g, g + 8; columns 2c, 2c + 1
    if (n0 < M) { y[(size_t)n0 * N + r0 + g] = static_cast<T>(s[0]); y[(size_t)n0 * N + r0 + g + 8] = static_cast<T>(s[2]); }
    if (n1 < M) { y[(size_t)n1 * N + r0 + g] = static_cast<T>(s[1]); y[(size_t)n1 * N + r0 + g + 8] = static_cast<T>(s[3]); }
  }
"""
_tc_kernel: Any = None


def tc_matmul(x: mx.array, w: mx.array, S: int = 4) -> mx.array:
    """[M, N] = x @ w.T on tensor cores (bf16, fp32 accumulation); N % 16 == 0, K % (32 S) == 0."""
    global _tc_kernel
    if _tc_kernel is None:
        _tc_kernel = mx.fast.cuda_kernel(
            name="skinny_tc_matmul", input_names=["x", "w"], output_names=["y"],
            source=_TC_SOURCE, header=_TC_HEADER,
        )  # fmt: skip
    M, K = x.shape
    N = w.shape[0]
    return _tc_kernel(
        inputs=[x, w],
        template=[("T", x.dtype), ("M", M), ("N", N), ("K", K), ("S", S)],
        grid=(-(-M // 8) * 32 * S, N // 16, 1),
        threadgroup=(32 * S, 1, 1),
        output_shapes=[(M, N)],
        output_dtypes=[x.dtype],
    )[0]


def variant(name: str):
    """'RxNW': the CUDA-core kernel; 'tcS': the tensor-core kernel with S k-slices; 'dRuU': the
    deep-load kernel the engine routes to (workers/skinny_linear.py; R weight rows per warp, U
    loads per row in flight)."""
    if name.startswith("d"):
        R, U = (int(v) for v in name[1:].split("u"))
        return lambda x, w: skinny_linear.matmul(x, w, R, U)
    if name.startswith("tc"):
        S = int(name[2:])
        return lambda x, w: tc_matmul(x, w, S)
    R, NW = (int(v) for v in name.split("x"))
    return lambda x, w: skinny_matmul(x, w, R, NW)


ROUTE = "4x4"  # the variant the forwards route to
TIMER = time_calls  # per call: time_calls (a sync per sweep of copies) or time_queued
FORWARD_TIMER = time_forward  # whole forwards: synced, or pipelined (time_forward_pipelined)


def serves(w: mx.array) -> bool:
    """A weight the kernel reads: 2-D half precision, rows a whole number of 16-byte loads."""
    return w.ndim == 2 and w.dtype in (mx.bfloat16, mx.float16) and w.shape[1] % 8 == 0


def _skinny(x: mx.array, w: mx.array) -> mx.array | None:
    """x @ w.T through the kernel when x has few rows, else None."""
    K = x.shape[-1]
    M = x.size // K if K else 0
    if not 0 < M <= MAX_ROWS or x.dtype != w.dtype:
        return None
    if ROUTE.startswith("tc") and (w.shape[0] % 16 or K % (32 * int(ROUTE[2:]))):
        return None
    y = variant(ROUTE)(x.reshape(M, K), w)
    return y.reshape(*x.shape[:-1], w.shape[0])


class SkinnyLinear(nn.Linear):
    def __call__(self, x: mx.array) -> mx.array:
        y = _skinny(x, self["weight"])
        if y is None:
            return super().__call__(x)
        return y + self["bias"] if "bias" in self else y


class SkinnyEmbedding(nn.Embedding):
    def as_linear(self, x: mx.array) -> mx.array:
        y = _skinny(x, self["weight"])
        return super().as_linear(x) if y is None else y


def install(model: nn.Module) -> int:
    """Switch `model`'s plain linear layers and embeddings to the kernel route."""
    switched = 0
    for _, module in model.named_modules():
        if type(module) is nn.Linear and serves(module["weight"]):
            module.__class__ = SkinnyLinear
        elif type(module) is nn.Embedding and serves(module["weight"]):
            module.__class__ = SkinnyEmbedding
        else:
            continue
        switched += 1
    return switched


PRESETS = {"1b": (2048, 16), "6b": (4096, 32)}


def shapes(hidden: int) -> dict[str, tuple[int, int]]:
    """(N, K) of each weight of bench/gpu.py's preset (kv heads = hidden / 256, head dim 128)."""
    return {
        "q/o": (hidden, hidden),
        "k/v": (hidden // 2, hidden),
        "gate/up": (3 * hidden, hidden),
        "down": (hidden, 3 * hidden),
        "lm_head": (32000, hidden),
    }


def per_call(rows: list[int], variants: list[str], reps: int, presets: list[str]) -> list[dict]:
    out = []
    for preset in presets:
        hidden = PRESETS[preset][0]
        for name, (N, K) in shapes(hidden).items():
            ws = streamed_weights(N, K)
            for M in rows:
                x = mx.random.normal((M, K)).astype(mx.bfloat16)
                xs = [x] * len(ws)
                ref = x.astype(mx.float32) @ ws[0].astype(mx.float32).T
                mlx_y = x @ ws[0].T
                row = {"preset": preset, "weight": name, "N": N, "K": K, "M": M}
                row["mlx_us"] = 1e6 * TIMER(lambda a, b: a @ b.T, xs, ws, reps)
                row["mlx_err"] = float(mx.abs(mlx_y.astype(mx.float32) - ref).max())
                for v in variants:
                    fn = variant(v)
                    y = fn(x, ws[0])
                    row[v + "_us"] = 1e6 * TIMER(fn, xs, ws, reps)
                    row[v + "_err"] = float(mx.abs(y.astype(mx.float32) - ref).max())
                    row[v + "_row0_bitwise"] = bool(mx.array_equal(y[:1], fn(x[:1], ws[0])))
                best = min(variants, key=lambda v: row[v + "_us"])
                print(
                    f"{preset} {name:8s} M={M:2d}  mlx {row['mlx_us']:7.1f}  "
                    + "  ".join(f"{v} {row[v + '_us']:7.1f}" for v in variants)
                    + f"  best {best} ({row['mlx_us'] / row[best + '_us']:4.2f}x)  err "
                    f"{row['mlx_err']:.4f}/{row[best + '_err']:.4f}  row0==alone "
                    f"{all(row[v + '_row0_bitwise'] for v in variants)}",
                    flush=True,
                )
                out.append(row)
            del ws
    return out


def forwards(presets: list[str], repeats: int) -> list[dict]:
    global MAX_ROWS
    from bench.gpu import qwen3_model

    out = []
    for preset in presets:
        model, n = qwen3_model(*PRESETS[preset])
        switched = install(model)
        cells = forward_cells(model, [(B, W) for B in (1, 8) for W in (1, 5)])
        times: dict[str, list[float]] = {}
        for rep in range(repeats + 1):
            for (B, W), cell in cells.items():
                for mode in ("on", "off"):
                    MAX_ROWS = 8 if mode == "on" else 0
                    t = FORWARD_TIMER(model, cell)
                    if rep:
                        times.setdefault(f"{B},{W},{mode}", []).append(t)
        for B, W in cells:
            on = float(np.median(times[f"{B},{W},on"]))
            off = float(np.median(times[f"{B},{W},off"]))
            row = {"preset": preset, "params": n, "switched": switched, "B": B, "W": W,
                   "on_ms": 1e3 * on, "off_ms": 1e3 * off, "off_over_on": off / on}  # fmt: skip
            print(f"{preset} B={B} W={W}: on {1e3 * on:.2f} ms, off {1e3 * off:.2f} ms, "
                  f"off/on {off / on:.2f}", flush=True)  # fmt: skip
            out.append(row)
        for B in (1, 8):
            for mode in ("on", "off"):
                ratio = med(times, B, 5, mode) / med(times, B, 1, mode)
                print(f"{preset} B={B} verify(5)/decode, route {mode}: {ratio:.2f}", flush=True)
        del model, cells
        mx.clear_cache()
    return out


def med(times: dict, B: int, W: int, mode: str) -> float:
    return float(np.median(times[f"{B},{W},{mode}"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/skinny_matmul.json")
    ap.add_argument("--rows", default="1,2,4,5,8,16,40")
    ap.add_argument("--variants", default="4x4,2x4,8x4,tc2,tc4,tc8")
    ap.add_argument("--route", default="4x4", help="the variant whole forwards route to")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--skip-calls", action="store_true")
    ap.add_argument(
        "--timing",
        choices=["synced", "queued"],
        default="synced",
        help="queued: 64 calls per evaluation and forwards launched back to back",
    )
    args = ap.parse_args()
    global ROUTE, TIMER, FORWARD_TIMER
    ROUTE = args.route
    if args.timing == "queued":
        TIMER, FORWARD_TIMER = time_queued, time_forward_pipelined
    variants = args.variants.split(",")
    rows = [int(r) for r in args.rows.split(",")]
    res = {"device": str(mx.default_device()), "platform": platform.platform(),
           "mlx": mx.__version__}  # fmt: skip
    if not args.skip_calls:
        res["per_call"] = per_call(rows, variants, args.reps, args.presets.split(","))
    res["route"], res["timing"] = ROUTE, args.timing
    res["forwards"] = forwards(args.presets.split(","), args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
