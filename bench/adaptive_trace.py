"""The adaptive MTP engine as served, round by round: the depth it took and what each round cost.

    python -m bench.adaptive_trace --model-dir DIR --batch-sizes 8,16 [--prompts 16]
        [--reps 4] --out F.json

Per batch size, fresh engines as a serving worker builds them (warm-up; the MTP engine with the
depth policy up to depth 3), then `--reps` passes of each over the held-out prompts (greedy, 96
tokens or `--spread` around 96, `ignore_eos`), plain first. For the MTP passes it records every round the policy
observed (rows, depth, seconds, drafts accepted) and prints the depth sequence run-length
encoded (`3x127`: 127 rounds at depth 3) and each (rows, depth) cell's rounds, median and total
milliseconds. The first pass of fresh engines includes their cold builds (on MLX CUDA).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="8,16")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--spread", type=float, default=0.0, help="as bench/p5_pairs.py's")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = spread_params(len(prompts), 96, args.spread)  # spread 0: 96 tokens each
    res: dict = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        plain = Engine.load(args.model_dir, max_batch_size=B, warm_up=True)
        mtp = Engine.load(args.model_dir, drafter="mtp", max_batch_size=B, draft_depth=3,
                          adaptive_depth=True, warm_up=True)  # fmt: skip
        policy = mtp.depth_policy
        assert policy is not None
        log: list[tuple[int, int, float, int]] = []  # (rows, depth, ms, accepted)
        observe = policy.observe

        def logged(counts, accepted, seconds, _observe=observe, _log=log):  # type: ignore[no-untyped-def]
            _log.append((len(counts), int(np.max(counts, initial=0)), round(seconds * 1e3, 2),
                         int(np.sum(accepted))))  # fmt: skip
            return _observe(counts, accepted, seconds)

        policy.observe = logged  # type: ignore[method-assign]
        for rep in range(args.reps):
            r: dict = {}
            for name, engine in (("plain", plain), ("mtp", mtp)):
                log.clear()
                t0 = time.perf_counter()
                outs = engine.generate(prompts, sp)
                r[name] = round(sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0), 1)
            cells: dict[str, list[float]] = {}
            runs: list[list[int]] = []  # [depth, rounds] in order
            for b, k, ms, _ in log:
                cells.setdefault(f"{b},{k}", []).append(ms)
                if runs and runs[-1][0] == k:
                    runs[-1][1] += 1
                else:
                    runs.append([k, 1])
            r["cells"] = {key: [len(v), round(float(np.median(v)), 2), round(float(np.sum(v)), 1)]
                          for key, v in sorted(cells.items())}  # fmt: skip
            r["runs"] = runs
            r["acceptance"] = policy.acceptance().round(3).tolist()
            r["ratio"] = round(r["mtp"] / r["plain"], 3)
            res[f"B={B} rep{rep}"] = r
            print(f"B={B} rep{rep}: depths {' '.join(f'{k}x{n}' for k, n in runs)[:1500]}")
            print(f"B={B} rep{rep}: plain {r['plain']} mtp {r['mtp']} ratio {r['ratio']} "
                  f"cells (rounds, median ms, total ms) {r['cells']}", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
