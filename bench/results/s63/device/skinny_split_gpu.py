"""Stop 63 (GPU): workers/skinny_linear.py with k-splits (S warps per group of R weight rows, each
summing a slice of k, added in split order through shared memory), against S = 1 (stop 53's
kernel) and MLX's matmul.

Stop 53 left P2 at B = 1 (0.68-0.86 against 0.90): a 6.6B verify forward cost 1.31x a decode
forward on the device. Per call, the 5-row kernel took 25 us on a [4096, 4096] weight where MLX's
1-row gemv took 12 (bench/results/s27/skinny_matmul_deep_h200.json): N / R = 1,024 warps, ~8 an
SM, too few loads in flight to stream HBM. Splitting k multiplies the warps by S.

1. Per call (queued, weights streamed from HBM): every (R, U, S) variant at M = 5 and 8 on the
   ~1B and ~6B presets' weights, MLX at M = 1 and M beside; the error against fp32 and whether
   row 0 of the M-row call equals a 1-row call of the same variant bit for bit.
2. The fastest S per weight shape at M = 5 (ties to the smaller S) becomes skinny_linear's table.
3. Whole engine passes (bench.gpu's forced drafter, depth 4; plain): the table against S = 1, in
   turns, with BatchGenerator beside: P2's efficiency both ways.

    git apply bench/results/s63/device/skinny_split.patch  # the kernel with splits: not kept
    python3 bench/results/s63/device/skinny_split_gpu.py --out F.json [--presets 6b,1b]

Result (H200, skinny_split_h200.json): no gain worth its code. Per call at M = 5 the best split
took 6.6B q/o 20.8 us against 24.3 at S = 1 (MLX's 1-row gemv: 14.9), k/v 15.0 against 20.6,
~1B within +-2 us; whole passes with the fastest S per shape against S = 1 read 0.92 / 1.08 (6.6B
forced, B = 1 / 8) and 1.00 / 1.02 (~1B), where plain at B = 1 (which never calls the kernel)
moved 0.95 between the sides: the card's spread. So more warps in flight is not what a 5-row
call lacks; stacking q, k and v into one matmul was (fused_qkv_gpu.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.engine import run_batch_generator
from bench.forced_drafter import DeviceForcedDrafter
from bench.forward_timing import streamed_weights, time_queued
from bench.gpu import PRESETS, qwen3_model
from bench.skinny_matmul import shapes
from workers import Engine, SamplingParams, skinny_linear

DRY = os.environ.get("DRY") == "1"  # the CPU: MLX's matmul stands in for the kernel (logic only)
VARIANTS = [(4, 2, 1), (2, 4, 1), (4, 2, 2), (4, 2, 4), (2, 4, 4), (4, 2, 8), (2, 4, 8)]


def kernel(R: int, U: int, S: int):
    if DRY:
        return lambda x, w: x @ w.T
    return lambda x, w: skinny_linear.matmul(x, w, R, U, S)


def per_call(presets: list[str], rows: list[int]) -> list[dict]:
    out = []
    for preset in presets:
        for name, (N, K) in shapes(PRESETS[preset][0]).items():
            if name == "lm_head":
                continue
            ws = streamed_weights(N, K)
            x1 = mx.random.normal((1, K)).astype(mx.bfloat16)
            mlx1 = 1e6 * time_queued(lambda a, b: a @ b.T, [x1], ws)
            for M in rows:
                x = mx.random.normal((M, K)).astype(mx.bfloat16)
                ref = x.astype(mx.float32) @ ws[0].astype(mx.float32).T
                row = {"preset": preset, "weight": name, "N": N, "K": K, "M": M, "mlx1_us": mlx1}
                row["mlx_us"] = 1e6 * time_queued(lambda a, b: a @ b.T, [x], ws)
                for R, U, S in VARIANTS:
                    fn, v = kernel(R, U, S), f"r{R}u{U}s{S}"
                    y = fn(x, ws[0])
                    row[v + "_us"] = 1e6 * time_queued(fn, [x], ws)
                    row[v + "_err"] = float(mx.abs(y.astype(mx.float32) - ref).max())
                    row[v + "_row0"] = bool(mx.array_equal(y[:1], fn(x[:1], ws[0])))
                cells = "  ".join(
                    f"r{R}u{U}s{S} {row[f'r{R}u{U}s{S}_us']:6.1f}" for R, U, S in VARIANTS
                )
                errs = max(row[f"r{R}u{U}s{S}_err"] for R, U, S in VARIANTS)
                same = all(row[f"r{R}u{U}s{S}_row0"] for R, U, S in VARIANTS)
                print(f"{preset} {name:8s} M={M} mlx1 {mlx1:6.1f} mlx {row['mlx_us']:6.1f}  "
                      f"{cells}  err<={errs:.4f} row0 {same}", flush=True)  # fmt: skip
                out.append(row)
            del ws
    return out


def best_splits(calls: list[dict], M: int) -> dict[tuple[int, int], int]:
    """(N, K) -> the S of the fastest variant at M rows with the default (R, U) for M."""
    R, U = skinny_linear.tiling(M)
    table = {}
    for row in calls:
        if row["M"] != M:
            continue
        times = {S: row[f"r{R}u{U}s{S}_us"] for r, u, S in VARIANTS if (r, u) == (R, U)}
        fastest = min(times.values())
        table[(row["N"], row["K"])] = min(S for S, t in times.items() if t <= 1.02 * fastest)
    return table


def bytes_max(calls: list[dict], table: dict, M: int = 5) -> int:
    """skinny_linear's WEIGHT_BYTES_MAX for the split side: raised over the MLP weights when the
    split kernel beat MLX on every weight above the default at M rows (by 5%), else as is."""
    R, U = skinny_linear.tiling(M)
    big = [r for r in calls if r["M"] == M and r["N"] * r["K"] * 2 > skinny_linear.WEIGHT_BYTES_MAX]
    wins = [r[f"r{R}u{U}s{table[(r['N'], r['K'])]}_us"] < 0.95 * r["mlx_us"] for r in big]
    if big and all(wins):
        return max(r["N"] * r["K"] * 2 for r in big)
    return skinny_linear.WEIGHT_BYTES_MAX


def passes(
    model, B: int, depth: int, table: dict, repeats: int, max_bytes: int, max_tokens: int = 64
) -> dict:
    rng = np.random.default_rng(1)
    vocab = 32000
    prompts = [rng.integers(0, vocab, size=int(rng.integers(16, 64))).tolist() for _ in range(B)]
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    refs_out = Engine(model, None, max_batch_size=B).generate(prompts, sp)
    refs = {tuple(p): o.tokens for p, o in zip(prompts, refs_out)}

    def forced() -> Engine:
        d = DeviceForcedDrafter(refs, vocab=vocab)
        return Engine(model, None, drafter=d, max_batch_size=B, draft_depth=depth)

    default = skinny_linear.WEIGHT_BYTES_MAX
    configs = {
        "plain_s1": ({}, default, lambda: Engine(model, None, max_batch_size=B)),
        "plain_split": (table, max_bytes, lambda: Engine(model, None, max_batch_size=B)),
        "forced_s1": ({}, default, forced),
        "forced_split": (table, max_bytes, forced),
    }
    tps: dict[str, list[float]] = {k: [] for k in [*configs, "bg"]}
    same = {}
    per_round = 0.0
    for rep in range(repeats + 1):
        order = list(configs) if rep % 2 else list(configs)[::-1]
        for name in order:
            splits, skinny_linear.WEIGHT_BYTES_MAX, make = configs[name]
            skinny_linear.SPLIT_TABLE = dict(splits)
            skinny_linear.remove(model)  # the engine installs the route over the weights it takes
            engine = make()
            t0 = time.perf_counter()
            outs = engine.generate(prompts, sp)
            dt = time.perf_counter() - t0
            if rep:
                tps[name].append(sum(len(o.tokens) for o in outs) / dt)
            same[name] = sum(a.tokens == b.tokens for a, b in zip(outs, refs_out))
            if name == "forced_split":
                stats = [s for s in engine.take_round_stats() if s.batch_size]
                per_round = sum(s.num_generated_tokens for s in stats) / sum(
                    s.batch_size for s in stats
                )
        skinny_linear.SPLIT_TABLE, skinny_linear.WEIGHT_BYTES_MAX = {}, default
        skinny_linear.remove(model)
        bg = run_batch_generator(model, prompts, max_tokens, B)["tokens_per_s"]
        if rep:
            tps["bg"].append(bg)
    med = {k: float(np.median(v)) for k, v in tps.items()}
    return {
        "B": B,
        "split_weight_bytes_max": max_bytes,
        "tokens_per_round": per_round,
        "median_tokens_per_s": med,
        "each_pass": tps,
        "rows_equal_to_plain": same,
        "efficiency_s1": med["forced_s1"] / med["bg"] / per_round,
        "efficiency_split": med["forced_split"] / med["bg"] / per_round,
        "plain_split_over_s1": med["plain_split"] / med["plain_s1"],
        "forced_split_over_s1": med["forced_split"] / med["forced_s1"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", default="6b,1b")
    ap.add_argument("--rows", default="5,8")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-calls", action="store_true")
    args = ap.parse_args()
    presets = args.presets.split(",")
    res: dict = {"device": str(mx.default_device()), "mlx": mx.__version__}
    table: dict = {}
    max_bytes = skinny_linear.WEIGHT_BYTES_MAX
    if not args.skip_calls:
        res["per_call"] = per_call(presets, [int(m) for m in args.rows.split(",")])
        table = best_splits(res["per_call"], 5)
        res["table_m5"] = {f"{n}x{k}": s for (n, k), s in table.items()}
        max_bytes = bytes_max(res["per_call"], table)
        print("splits at M=5:", res["table_m5"], "weight bytes max", max_bytes, flush=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    res["passes"] = {}
    for preset in presets:
        model, n = qwen3_model(*PRESETS[preset])
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            row = passes(model, B, 4, table, args.repeats, max_bytes)
            res["passes"][f"{preset}_b{B}"] = row
            print(preset, f"B={B}", json.dumps({k: v for k, v in row.items() if k != "each_pass"}),
                  flush=True)  # fmt: skip
            Path(args.out).write_text(json.dumps(res, indent=1))
        del model
        mx.clear_cache()


if __name__ == "__main__":
    main()
