"""Stop 53: workers/attention_cuda.py's window attention before (a block per row, query head
and window query: keys read once per query) and after (a block per row and query head: keys
read once for the window), in one process.

`micro`: per shape, each form's error against masked fp32 attention, whether the two agree bit
for bit (same warps), and the time per call; run it under Nsight Compute for launch-by-launch
times (kernel names: ragged_window_attention_* after, window_attention_before_* before).
Also launches the new form at head dims 64 / 128 / 256 and windows 1-8 at its warps cap, which
fails if a block asks for more registers than an SM holds.
`rounds`: plain steps and forced depth-4 rounds (bench/forced_drafter.py) with each form routed,
fresh engines in turns, outputs checked against the plain engine's.

    python3 bench/results/s53/device/kernel_ab_gpu.py micro --out $OUT/micro.json
    python3 bench/results/s53/device/kernel_ab_gpu.py rounds --presets 1b,6b --out $OUT/rounds.json
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx
import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams, attention_cuda

AFTER = attention_cuda.ragged_window_attention
# The kernel as it was at e1beabd (U = 1), kept here to measure against.
BEFORE_SOURCE = r"""
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
_before = None


def before(q, k, v, lengths, scale, num_warps=None):
    global _before
    B, HQ, W, D = q.shape
    few = B * HQ <= attention_cuda.FEW_ROW_HEADS
    NW = num_warps or (attention_cuda.FEW_ROW_HEADS_WARPS if few else attention_cuda.NUM_WARPS)
    if _before is None:
        _before = mx.fast.cuda_kernel(
            name="window_attention_before",
            input_names=["q", "k", "v", "lengths", "scale"],
            output_names=["out"],
            source=BEFORE_SOURCE,
            ensure_row_contiguous=False,
        )
    return _before(
        inputs=[mx.contiguous(q), k, v, lengths, mx.array([scale], mx.float32)],
        template=[
            ("T", q.dtype),
            ("W", W),
            ("HQ", HQ),
            ("HK", k.shape[1]),
            ("D", D),
            ("NW", NW),
            ("U", 1),
        ],  # fmt: skip
        grid=(B * HQ * W * 32 * NW, 1, 1),
        threadgroup=(32 * NW, 1, 1),
        output_shapes=[q.shape],
        output_dtypes=[q.dtype],
    )[0]


def reference(q, k, v, lengths, scale):  # fp32, masked
    B, HQ, W, D = q.shape
    S, HK = k.shape[2], k.shape[1]
    kk = mx.repeat(k.astype(mx.float32), HQ // HK, axis=1)
    vv = mx.repeat(v.astype(mx.float32), HQ // HK, axis=1)
    s = (q.astype(mx.float32) * scale) @ kk.transpose(0, 1, 3, 2)  # [B, HQ, W, S]
    limit = lengths[:, None, None, None] + mx.arange(W)[None, None, :, None]
    s = mx.where(mx.arange(S)[None, None, None, :] <= limit, s, -mx.inf)
    return mx.softmax(s, axis=-1) @ vv


def per_call_us(fn, calls, passes=5) -> float:
    times = []
    for p in range(passes + 1):
        outs = [fn(*c) for c in calls]
        t0 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        if p:
            times.append((time.perf_counter() - t0) / len(calls) * 1e6)
    return float(np.median(times))


def micro(args) -> dict:
    HQ, HK, D = 32, 16, 128  # the 6.6B preset's attention
    rng = np.random.default_rng(0)
    rows = []
    for B in (1, 8):
        for S in (133, 512):
            for W in (1, 5, 8):
                lens = [S - W] + [int(rng.integers(1, S - W + 1)) for _ in range(B - 1)]
                lengths = mx.array(lens, dtype=mx.int32)
                calls = []
                for _ in range(args.n):
                    q = mx.random.normal((B, W, HQ, D)).astype(mx.bfloat16).transpose(0, 2, 1, 3)
                    k, v = (mx.random.normal((B, HK, S, D)).astype(mx.bfloat16) for _ in range(2))
                    calls.append((q, k, v, lengths, D**-0.5))
                ref = reference(*calls[0])
                a, b = AFTER(*calls[0]), before(*calls[0])
                row = {
                    "B": B, "slots": S, "W": W,
                    "err_after": mx.abs(a.astype(mx.float32) - ref).max().item(),
                    "err_before": mx.abs(b.astype(mx.float32) - ref).max().item(),
                    "bits_equal": mx.array_equal(a, b).item(),
                }  # fmt: skip
                # the forms take turns going first, shape by shape (clocks unlocked: the first
                # launches of a shape may run slower)
                first, second = (AFTER, before) if len(rows) % 2 == 0 else (before, AFTER)
                us = {f: per_call_us(f, calls, args.passes) for f in (first, second)}
                row |= {
                    "us_after": us[AFTER],
                    "us_before": us[before],
                    "after_first": first is AFTER,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    fits = {}
    for D in (64, 128, 256):
        for W in range(1, 9):
            q = mx.random.normal((2, 8, W, D)).astype(mx.bfloat16)
            kv = mx.random.normal((2, 2, 40, D)).astype(mx.bfloat16)
            nw = attention_cuda.warps_that_fit(W, D)
            lengths = mx.array([20, 3], mx.int32)
            try:
                out = AFTER(q, kv, kv, lengths, D**-0.5, nw).astype(mx.float32)
                err = mx.abs(out - reference(q, kv, kv, lengths, D**-0.5)).max().item()
                fits[f"D={D} W={W} warps={nw}"] = round(err, 5)
            except RuntimeError as e:  # a block asking for more registers than an SM holds
                fits[f"D={D} W={W} warps={nw}"] = str(e)[:80]
    print(json.dumps(fits), flush=True)
    return {"rows": rows, "max_error_at_the_warps_cap": fits}


def rounds(args) -> dict:
    res: dict = {}
    for preset in args.presets.split(","):
        model, n = qwen3_model(*PRESETS[preset])
        entry = res[preset] = {"model": f"random qwen3, {n / 1e9:.2f}B, bf16"}
        for B in (1, 8):
            rng = np.random.default_rng(B)
            prompts = [rng.integers(0, 32000, size=40).tolist() for _ in range(B)]
            sp = SamplingParams(max_tokens=args.tokens, ignore_eos=True)
            attention_cuda.ragged_window_attention = before
            ref = [o.tokens for o in Engine(model, None, max_batch_size=B).generate(prompts, sp)]
            refs = {tuple(p): r + [0] * 8 for p, r in zip(prompts, ref)}
            configs = [(f"{m} {k}", m, k) for m in ("plain", "forced") for k in ("before", "after")]
            ms: dict = {c[0]: [] for c in configs}
            same: dict = {}
            for rep in range(args.repeats + 1):
                for name, mode, kern in configs:
                    attention_cuda.ragged_window_attention = before if kern == "before" else AFTER
                    d = DeviceForcedDrafter(refs, vocab=32000) if mode == "forced" else None
                    e = Engine(model, None, drafter=d, max_batch_size=B, draft_depth=4)
                    t0 = time.perf_counter()
                    out = [o.tokens for o in e.generate(prompts, sp)]
                    dt = time.perf_counter() - t0
                    steps = len([s for s in e.take_round_stats() if s.batch_size])
                    same[name] = out == ref
                    if rep:
                        ms[name].append(1e3 * dt / steps)
            med = {k: float(np.median(v)) for k, v in ms.items()}
            entry[str(B)] = {
                "ms_per_step": med,
                "round_in_plain_steps": {k: med[f"forced {k}"] / med[f"plain {k}"] for k in ("before", "after")},
                "identical_to_plain_before": same,
                "each_ms": {k: [round(x, 3) for x in v] for k, v in ms.items()},
            }  # fmt: skip
            print(
                preset,
                B,
                json.dumps(
                    {
                        k: entry[str(B)][k]
                        for k in (
                            "ms_per_step",
                            "round_in_plain_steps",
                            "identical_to_plain_before",
                        )
                    }
                ),
                flush=True,
            )
        attention_cuda.ragged_window_attention = AFTER
        del model
        mx.clear_cache()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["micro", "rounds"])
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    res = micro(args) if args.mode == "micro" else rounds(args)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
