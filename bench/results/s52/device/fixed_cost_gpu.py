"""Stop 52: where a B = 1 round's time goes beyond its tokens, on the GPU (P2 at B = 1).

P2's efficiency times whole `generate` calls of 64 tokens, each on a fresh engine: a request's
fixed costs (admission, prefill, the first rounds) are spread over 64 plain steps but only
~13 forced rounds. This splits them: per configuration, a call of 1 token (the fixed cost F)
and calls of N tokens, so a step's cost is (T_N - T_1) / steps. Plain and forced (the
always-right drafter at depth 4, bench/forced_drafter.py) take turns, fresh engines every pass,
after one untimed pass each, as bench/gpu.py measures.

    python3 bench/results/s52/device/fixed_cost_gpu.py --presets 1b,6b --out $OUT/x.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams


def measure(preset: str, lengths: list[int], repeats: int) -> dict:
    model, n = qwen3_model(*PRESETS[preset])
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 32000, size=40).tolist()
    ref = (
        Engine(model, None, max_batch_size=1)
        .generate([prompt], SamplingParams(max_tokens=max(lengths) + 8, ignore_eos=True))[0]
        .tokens
    )
    refs = {tuple(prompt): ref}
    makers = {
        "plain": lambda: Engine(model, None, max_batch_size=1),
        "forced": lambda: Engine(
            model,
            None,
            drafter=DeviceForcedDrafter(refs, vocab=32000),
            max_batch_size=1,
            draft_depth=4,
        ),  # fmt: skip
    }
    secs: dict[str, list[float]] = {f"{k} {t}": [] for k in makers for t in lengths}
    rounds: dict[str, int] = {}
    for rep in range(repeats + 1):
        for t in lengths:
            for name, make in makers.items():
                engine = make()
                sp = SamplingParams(max_tokens=t, ignore_eos=True)
                t0 = time.perf_counter()
                out = engine.generate([prompt], sp)[0]
                dt = time.perf_counter() - t0
                assert out.tokens == ref[:t], (name, t)  # lossless, or nothing counts
                stats = [s for s in engine.take_round_stats() if s.batch_size]
                rounds[f"{name} {t}"] = len(stats)
                if rep:
                    secs[f"{name} {t}"].append(dt)
    med = {k: float(np.median(v)) for k, v in secs.items()}
    row: dict = {"model": f"random qwen3, {n / 1e9:.2f}B, bf16", "median_s": med,
                 "rounds": rounds, "each_s": secs}  # fmt: skip
    t1, tn = lengths[0], lengths[-1]
    for name in makers:
        steps = rounds[f"{name} {tn}"] - rounds[f"{name} {t1}"]
        row[f"{name}_fixed_ms"] = 1e3 * med[f"{name} {t1}"]
        row[f"{name}_round_ms"] = 1e3 * (med[f"{name} {tn}"] - med[f"{name} {t1}"]) / steps
    row["tokens_per_forced_round"] = (tn - t1) / (rounds[f"forced {tn}"] - rounds[f"forced {t1}"])
    # A round's efficiency without the request's fixed costs: a forced round's cost in plain
    # steps, against the tokens it emits.
    row["round_efficiency"] = row["plain_round_ms"] / row["forced_round_ms"]
    for t in lengths[1:]:
        row[f"whole_call_efficiency_{t}"] = (
            med[f"plain {t}"] / med[f"forced {t}"] / row["tokens_per_forced_round"]
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--tokens", default="1,64,256")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    res: dict = {"tokens": lengths, "models": {}}
    for preset in args.presets.split(","):
        row = res["models"][preset] = measure(preset, lengths, args.repeats)
        print(preset, json.dumps({k: v for k, v in row.items() if k != "each_s"}), flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
