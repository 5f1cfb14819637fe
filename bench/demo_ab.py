"""`./run demo` in two source trees, alternating, with its speedup lines parsed into JSON.

    python -m bench.demo_ab --before /tmp/wt_before [--after .] [--repeats 2] --out F.json

The demo's two lines (single stream, batch job) are ratios measured inside one demo run; two
trees (a `git worktree` of an older commit against this one) alternate so that the machine's
load hits both alike. Each run is `python -m cluster.cli demo` with PYTHONPATH set to its tree
and the BLAS that `./run demo` preloads (set LD_PRELOAD yourself, as `./run` does).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = re.compile(
    r"speedup \((single stream|batch job)\): ([\d.]+)x \(([\d.]+) vs ([\d.]+) tokens/s"
)


def run_demo(tree: Path, tmpdir: Path | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if tmpdir is not None:  # the tree's own MLX kernel cache: kernels are kept by name, so a
        env["TMPDIR"] = str(tmpdir)  # tree would otherwise reuse those the other built
    out = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "demo"],
        cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=1800,
    ).stdout  # fmt: skip
    result: dict = {}
    for kind, ratio, spec, plain in LINE.findall(out):
        key = "single_stream" if kind == "single stream" else "batch_job"
        prefix = "single" if key == "single_stream" else "batch"
        result[key] = float(ratio)
        result[f"{prefix}_mtp_tok_s"], result[f"{prefix}_plain_tok_s"] = float(spec), float(plain)
    if set(result) != {
        "single_stream", "batch_job", "single_mtp_tok_s", "single_plain_tok_s",
        "batch_mtp_tok_s", "batch_plain_tok_s",
    }:  # fmt: skip
        raise RuntimeError(f"the demo printed no speedup lines in {tree}:\n{out[-2000:]}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the older tree (a git worktree)")
    ap.add_argument("--after", default=".", help="the newer tree (default: this one)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--own-kernel-cache", action="store_true",
                    help="each tree its own $TMPDIR (MLX's compiled CPU kernels, kept by name: "
                    "a tree that builds them differently, workers/cpu_jit.py, must not share)")  # fmt: skip
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    tmp = Path(tempfile.mkdtemp(prefix="demo_ab_")) if args.own_kernel_cache else None
    runs = []
    for _ in range(args.repeats):
        for name, tree in trees.items():
            t0 = time.time()
            own = None
            if tmp is not None:
                own = tmp / name
                own.mkdir(exist_ok=True)
            row = {"tree": name, **run_demo(tree, own), "wall_s": round(time.time() - t0, 1)}
            print(json.dumps(row), flush=True)
            runs.append(row)
    report = {
        "machine": f"{os.cpu_count()} cores, LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}",
        "command": "python -m bench.demo_ab " + " ".join(sys.argv[1:]),
        "trees": {k: str(v) for k, v in trees.items()},
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
