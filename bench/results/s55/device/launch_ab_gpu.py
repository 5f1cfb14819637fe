"""Stop 55 on the GPU: should MTP rounds of fewer than launch.ROWS_MIN rows launch from the
launcher thread? Stop 32 set ROWS_MIN = 8 from plain rounds of the hybrid (~2.5 ms, where two
thread hand-offs cost more than the overlap gains); an MTP round at B = 4 costs ~6.4 ms, 3.7 of
them MLX's encoding (bench/results/s55/split_b4_mtp_h200.json).

    python3 bench/results/s55/device/launch_ab_gpu.py --model-dir DIR [--batch-sizes 1,4]
        [--prompts 16,32] [--cap 4] [--passes 3]

Per batch size, in one process: plain and adaptive MTP (up to `cap`, warm-up on, as a serving
worker loads them), each as loaded (rounds of < ROWS_MIN rows launched on the engine thread)
and with every round launched from the launcher thread (`_launch_rows = 1`). One untimed pass,
then `passes` rounds of all four in turns. Prints MTP ÷ plain per setting, thread ÷ default
per engine, tokens/s and rows equal to plain's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params, timed_pass
from bench.peers import heldout_prompts
from workers import Engine


def load(model_dir: Path, B: int, cap: int, mtp: bool, thread: bool) -> Engine:
    if mtp:
        e = Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=cap,
                        adaptive_depth=True, warm_up=True)  # fmt: skip
    else:
        e = Engine.load(model_dir, max_batch_size=B, warm_up=True)
    assert e._launcher is not None, "no launcher on this backend"
    if thread:
        e._launch_rows = 1
    return e


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--prompts", default="16,32")
    ap.add_argument("--cap", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    for B, n in zip(
        [int(b) for b in args.batch_sizes.split(",")], [int(p) for p in args.prompts.split(",")]
    ):
        prompts = heldout_prompts(args.model_dir, n)
        sp = spread_params(n, args.max_tokens, args.spread)
        engines = {
            f"{kind}_{'thread' if thread else 'default'}": load(
                args.model_dir, B, args.cap, kind == "mtp", thread
            )
            for thread in (False, True)
            for kind in ("plain", "mtp")
        }
        rates: dict[str, list[float]] = {k: [] for k in engines}
        same = {}
        for p in range(args.passes + 1):  # pass 0: untimed
            outs = {}
            order = list(engines) if p % 2 else list(engines)[::-1]
            for name in order:
                r = timed_pass(engines[name], prompts, sp)
                outs[name] = r["outputs"]
                if p:
                    rates[name].append(r["tokens_per_s"])
            same = {k: sum(a == b for a, b in zip(outs["plain_default"], v))
                    for k, v in outs.items()}  # fmt: skip

        def med(a: str, b: str, rates: dict[str, list[float]] = rates) -> float:
            return round(statistics.median(x / y for x, y in zip(rates[a], rates[b])), 3)

        print(json.dumps({
            "batch_size": B, "prompts": n, "cap": args.cap, "device": str(mx.default_device()),
            "p5_mtp_over_plain": {"default": med("mtp_default", "plain_default"),
                                  "thread": med("mtp_thread", "plain_thread"),
                                  "mtp_thread_over_plain_default":
                                      med("mtp_thread", "plain_default")},
            "thread_over_default": {"plain": med("plain_thread", "plain_default"),
                                    "mtp": med("mtp_thread", "mtp_default")},
            "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
            "rows_equal_to_plain_last_pass": same,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
