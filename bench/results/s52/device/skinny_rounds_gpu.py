"""Stop 52: B = 1 round costs with workers/skinny_linear.py on every linear, on the attention
projections only (its WEIGHT_BYTES_MAX), or off, in turns in one process, fresh engines every
pass (the route is per model: each maker sets it before its engine is built).

A pass generates 256 tokens of one 40-token prompt, so the request's fixed costs (12-19 ms,
fixed_cost_gpu.py) are ~1-2% of a plain pass; ms per round = pass time / rounds. Forced: the
always-right drafter at depth 4 (bench/forced_drafter.py). Every output is checked against the
plain engine's tokens with MLX's own matmuls.

    python3 bench/results/s52/device/skinny_rounds_gpu.py --presets 1b,6b --out $OUT/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams, skinny_linear

SMALL = skinny_linear.WEIGHT_BYTES_MAX  # the attention projections of a 1-8B model


def measure(preset: str, tokens: int, repeats: int) -> dict:
    model, n = qwen3_model(*PRESETS[preset])
    prompt = np.random.default_rng(1).integers(0, 32000, size=40).tolist()
    sp = SamplingParams(max_tokens=tokens, ignore_eos=True)

    def engine(route: str, forced: bool) -> Engine:
        skinny_linear.remove(model)
        skinny_linear.WEIGHT_BYTES_MAX = {"all": 1 << 40, "small": SMALL, "off": 0}[route]
        drafter = DeviceForcedDrafter(refs, vocab=32000) if forced else None
        return Engine(model, None, drafter=drafter, max_batch_size=1, draft_depth=4)

    refs: dict = {}
    ref = engine("off", False).generate([prompt], sp)[0].tokens
    refs[tuple(prompt)] = ref + [0] * 8
    configs = [(f"{'forced' if f else 'plain'} {r}", r, f)
               for f in (False, True) for r in ("off", "small", "all")]  # fmt: skip
    ms: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    same: dict[str, bool] = {}
    for rep in range(repeats + 1):
        for name, route, forced in configs:
            e = engine(route, forced)
            t0 = time.perf_counter()
            out = e.generate([prompt], sp)[0].tokens
            dt = time.perf_counter() - t0
            rounds = len([s for s in e.take_round_stats() if s.batch_size])
            same[name] = out == ref
            if rep:
                ms[name].append(1e3 * dt / rounds)
    med = {k: float(np.median(v)) for k, v in ms.items()}
    return {
        "model": f"random qwen3, {n / 1e9:.2f}B, bf16",
        "ms_per_round": med,
        "round_in_plain_steps": {r: med[f"forced {r}"] / med["plain off"] for r in ("off", "small", "all")},
        "identical_to_plain_off": same,
        "each_ms": {k: [round(x, 3) for x in v] for k, v in ms.items()},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ[skinny_linear.ENV] = "1"
    res: dict = {"tokens": args.tokens, "models": {}}
    for preset in args.presets.split(","):
        row = res["models"][preset] = measure(preset, args.tokens, args.repeats)
        print(preset, json.dumps({k: v for k, v in row.items() if k != "each_ms"}), flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
