"""Stop 52: bench/gpu.py's P1 / P2 cells with workers/skinny_linear.py on every linear up to
`--max-mb` (default: all, the MLP's too) against MLX's own matmuls, in turns in one process
(`measure(..., ab="skinny")`). encode_cost_gpu.py found MLX's 2-8-row GEMM (cuBLASLt) costing
the host 13-27 us a call to encode against 5-7 for the 1-row gemv and the kernel.

    python3 bench/results/s52/device/skinny_all_gpu.py --presets 1b,6b --batch-sizes 1 \
        --out $OUT/skinny_all_h200.json
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from bench.gpu import PRESETS, measure, qwen3_model
from workers import skinny_linear


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--batch-sizes", default="1")
    ap.add_argument("--max-mb", type=float, default=1 << 20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    skinny_linear.WEIGHT_BYTES_MAX = int(args.max_mb * (1 << 20))
    os.environ[skinny_linear.ENV] = "1"  # engines install it; the off side removes it
    res: dict = {"weight_bytes_max": skinny_linear.WEIGHT_BYTES_MAX, "models": {}}
    for preset in args.presets.split(","):
        model, n = qwen3_model(*PRESETS[preset])
        rows = res["models"][preset] = {"model": f"random qwen3, {n / 1e9:.2f}B, bf16"}
        rng = np.random.default_rng(1)
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            rows[str(B)] = row = measure(model, 32000, B, 64, 4, rng, args.repeats, "skinny")
            keep = ("plain_over_batch_generator", "efficiency", "plain_on_over_off",
                    "forced_on_over_off", "plain_off_over_batch_generator",
                    "verify_over_decode_time", "verify_over_decode_time_off",
                    "rows_identical_to_plain", "tokens_per_s_each_pass")  # fmt: skip
            print(preset, B, json.dumps({k: row[k] for k in keep}), flush=True)
        del model
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
