"""Stop 44: where a B = 1 round's wall time goes on the GPU, random bf16 Qwen3 6.6B (P2's model).

    python3 bench/results/s44/device/forced_split_6b.py [--depth 4] [--max-tokens 64] [--reps 3]

Plain decoding and the always-right drafter at depth 4 (bench/gpu.py's forced engine), each
pipelined (the engine's default) and one round at a time (pipeline=False: the host waits for
every round, so its time is host + device). Per engine: ms per round over `reps` timed passes
(after one untimed pass: CUDA builds kernels and graphs per shape), then one more pass with
bench/round_split.py's timers on the engine's phases. Prints one JSON line per engine.
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx
import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import qwen3_model
from bench.round_split import instrument
from workers import Engine, SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4)
    args = ap.parse_args()
    model, n = qwen3_model(4096, 32)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 32000, size=int(rng.integers(16, 64))).tolist()
               for _ in range(args.prompts)]  # fmt: skip
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    refs = {tuple(p): Engine(model, None, max_batch_size=1).generate([p], sp)[0].tokens
            for p in prompts}  # fmt: skip

    def make(name: str) -> Engine:
        pipeline = not name.endswith("_sync")
        if name.startswith("plain"):
            return Engine(model, None, max_batch_size=1, pipeline=pipeline)
        d = DeviceForcedDrafter(refs, vocab=32000)
        return Engine(model, None, drafter=d, max_batch_size=1, draft_depth=args.depth,
                      pipeline=pipeline)  # fmt: skip

    names = ["plain", "forced", "plain_sync", "forced_sync"]
    engines = {k: make(k) for k in names}
    for e in engines.values():
        for p in prompts:
            e.generate([p], sp)
        e.take_round_stats()
    per_round: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(args.reps):
        for k, e in engines.items():
            t0 = time.perf_counter()
            outs = [e.generate([p], sp)[0] for p in prompts]
            dt = time.perf_counter() - t0
            rounds = sum(1 for s in e.take_round_stats() if s.batch_size)
            per_round[k].append(1e3 * dt / rounds)
            assert [o.tokens for o in outs] == [refs[tuple(p)] for p in prompts], k
    for k, e in engines.items():
        split = instrument(e, False)
        t0 = time.perf_counter()
        for p in prompts:
            e.generate([p], sp)
        dt = time.perf_counter() - t0
        stats = [s for s in e.take_round_stats() if s.batch_size]
        split.restore()
        rounds = len(stats)
        print(json.dumps({
            "engine": k, "device": mx.default_device().__repr__(), "params": n,
            "ms_per_round_passes": [round(x, 3) for x in per_round[k]],
            "ms_per_round_median": round(float(np.median(per_round[k])), 3),
            "tokens_per_round": round(sum(s.num_generated_tokens for s in stats) / rounds, 3),
            "instrumented_ms_per_round": round(1e3 * dt / rounds, 3),
            "phases_ms_per_round": {kk: round(1e3 * v / rounds, 3) for kk, v in
                                    sorted(split.seconds.items(), key=lambda kv: -kv[1])[:14]},
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
