"""Where a round's host time goes: cProfile of engine steps on a random Qwen3 (bf16 on a GPU).

    python -m bench.profile_round --preset 1b --batch-size 1 --drafter forced|none
    python -m bench.profile_round --model-dir DIR --drafter mtp|none   # a checkpoint, its head

On a GPU the device computes while the host builds the next round, so the host's own time per
step (graph building, accept ops, emit, bookkeeping) is what bounds a small batch. Prints the
step time, then the functions with the most cumulative and own time. Engines launch on the
profiled thread (no launcher thread, which cProfile would not see) unless the environment
sets `SPECFLEET_LAUNCH_THREAD`.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from bench.forced_drafter import DeviceForcedDrafter
from bench.gpu import PRESETS, qwen3_model
from workers import Engine, SamplingParams, launch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="1b", choices=sorted(PRESETS) + ["default"])
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--drafter", default="forced", choices=["forced", "none", "mtp"])
    ap.add_argument("--model-dir", help="a checkpoint (e.g. bench/peer_trained.py's) on its "
                    "held-out prompts, instead of --preset")  # fmt: skip
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    # MLX's encoding under the profiled thread: no launcher thread (read as each engine is built)
    os.environ.setdefault(launch.ENV, "0")
    B = args.batch_size
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    if args.model_dir:
        from bench.peers import heldout_prompts

        if args.drafter == "forced":
            ap.error("--model-dir runs --drafter mtp or none")
        prompts = heldout_prompts(Path(args.model_dir), B)

        def make() -> Engine:
            drafter = "mtp" if args.drafter == "mtp" else None
            return Engine.load(
                args.model_dir, drafter=drafter, max_batch_size=B, draft_depth=args.depth
            )
    else:
        if args.drafter == "mtp":
            ap.error("--drafter mtp needs --model-dir")
        if args.preset == "default":  # the embedded default model
            model = Engine.load().model
        else:
            model, _ = qwen3_model(*PRESETS[args.preset])
        vocab = int(model.args.vocab_size)
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, vocab, size=32).tolist() for _ in range(B)]
        refs = {tuple(p): o.tokens for p, o in zip(prompts, Engine(model).generate(prompts, sp))}

        def make() -> Engine:
            d = DeviceForcedDrafter(refs, vocab) if args.drafter == "forced" else None
            return Engine(model, drafter=d, max_batch_size=B, draft_depth=args.depth)

    make().generate(prompts, sp)  # kernels for every shape
    engine = make()
    prof, dt = profile_pass(engine, prompts, sp)
    rounds = len([s for s in engine.take_round_stats() if s.batch_size])
    print(f"{args.preset} B={B} drafter={args.drafter}: {dt / rounds * 1e3:.2f} ms per round")
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    mx.synchronize()


def profile_pass(engine: Any, prompts: list, sp: Any) -> tuple[cProfile.Profile, float]:
    """cProfile over one `engine.generate(prompts, sp)` pass: the profile, the pass's seconds."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    engine.generate(prompts, sp)
    prof.disable()
    return prof, time.perf_counter() - t0


if __name__ == "__main__":
    main()
