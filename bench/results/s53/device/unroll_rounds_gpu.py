"""Stop 53: plain steps and forced rounds with the window attention kernel loading 1 or 4 keys
ahead (workers/attention_cuda.UNROLL), with workers/skinny_linear.py off or on the attention
projections (its WEIGHT_BYTES_MAX), in turns in one process, fresh engines every pass.

A pass generates `--tokens` tokens for each of B prompts of 40 tokens; ms per step or round =
pass time / engine steps. Forced: the always-right drafter at depth 4 (bench/forced_drafter.py).
Every output is checked against the plain engine's tokens with U = 1 and MLX's matmuls.

    python3 bench/results/s53/device/unroll_rounds_gpu.py --presets 1b,6b --batch-sizes 1,8 --out $OUT/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams, attention_cuda, skinny_linear

SMALL = skinny_linear.WEIGHT_BYTES_MAX  # the attention projections of a 1-8B model


def measure(model, B: int, tokens: int, repeats: int) -> dict:
    rng = np.random.default_rng(B)
    prompts = [rng.integers(0, 32000, size=40).tolist() for _ in range(B)]
    sp = SamplingParams(max_tokens=tokens, ignore_eos=True)

    def engine(skinny: bool, unroll: int, forced: bool) -> Engine:
        skinny_linear.remove(model)
        skinny_linear.WEIGHT_BYTES_MAX = SMALL if skinny else 0
        attention_cuda.UNROLL = unroll
        drafter = DeviceForcedDrafter(refs, vocab=32000) if forced else None
        return Engine(model, None, drafter=drafter, max_batch_size=B, draft_depth=4)

    refs: dict = {}
    ref = [o.tokens for o in engine(False, 1, False).generate(prompts, sp)]
    refs.update({tuple(p): r + [0] * 8 for p, r in zip(prompts, ref)})
    configs = [(f"{'forced' if f else 'plain'} skinny={int(s)} U={u}", s, u, f)
               for f in (False, True) for s in (False, True) for u in (1, 4)]  # fmt: skip
    ms: dict[str, list[float]] = {name: [] for name, *_ in configs}
    same: dict[str, bool] = {}
    for rep in range(repeats + 1):
        for name, s, u, f in configs:
            e = engine(s, u, f)
            t0 = time.perf_counter()
            out = [o.tokens for o in e.generate(prompts, sp)]
            dt = time.perf_counter() - t0
            steps = len([st for st in e.take_round_stats() if st.batch_size])
            same[name] = out == ref
            if rep:
                ms[name].append(1e3 * dt / steps)
    med = {k: float(np.median(v)) for k, v in ms.items()}
    base = med["plain skinny=0 U=1"]
    return {
        "ms_per_step": med,
        "in_base_plain_steps": {k: v / base for k, v in med.items()},
        "identical_to_plain": same,
        "each_ms": {k: [round(x, 3) for x in v] for k, v in ms.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ[skinny_linear.ENV] = "1"
    res: dict = {"tokens": args.tokens, "models": {}}
    for preset in args.presets.split(","):
        model, n = qwen3_model(*PRESETS[preset])
        entry = res["models"][preset] = {"model": f"random qwen3, {n / 1e9:.2f}B, bf16", "B": {}}
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            row = entry["B"][str(B)] = measure(model, B, args.tokens, args.repeats)
            print(
                preset,
                B,
                json.dumps({k: row[k] for k in ("in_base_plain_steps", "identical_to_plain")}),
                flush=True,
            )
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
