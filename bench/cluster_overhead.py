"""Cluster overhead: the same workload through the gateway (Ray, scheduler, gRPC, one worker)
and through an in-process Engine with the same model and drafter.

    .venv/bin/python bench/cluster_overhead.py [--out bench/out/cluster_overhead.json]

Starts `specfleet up --workers 1` as a subprocess, waits for its gateway line, sends the shipped
held-out prompts with `Client.generate_batch`, and compares tokens/s with Engine.generate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_gateway(drafter: str, depth: int, batch: int) -> tuple[subprocess.Popen, str]:
    cmd = [
        sys.executable, "-m", "cluster.cli", "up", "--workers", "1", "--gateway-port", "0",
        "--drafter", drafter, "--draft-depth", str(depth), "--max-batch-size", str(batch),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.time() + 180
    address = None
    for line in proc.stderr:
        sys.stderr.write(line)
        if m := re.search(r"gateway:\s+(\S+)", line):
            address = m.group(1)
        if "serving" in line and address:
            return proc, address
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("specfleet up did not come up")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", default="mtp")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default="bench/out/cluster_overhead.json")
    args = ap.parse_args()

    from cluster import Client
    from workers import Engine, SamplingParams
    from workers.default_model import HELDOUT_PROMPTS

    lines = [json.loads(x) for x in HELDOUT_PROMPTS.read_text().splitlines() if x.strip()]
    prompts = [ln["body"]["prompt"] for ln in lines][: args.prompts]

    engine = Engine.load(drafter=args.drafter, draft_depth=args.depth, max_batch_size=args.batch)
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    engine.generate(prompts, sp)  # warm-up
    t0 = time.perf_counter()
    local = engine.generate(prompts, sp)
    t_local = time.perf_counter() - t0
    n_local = sum(len(c.tokens) for c in local)

    proc, address = start_gateway(args.drafter, args.depth, args.batch)
    try:
        with Client(address) as client:
            kw = {"max_tokens": args.max_tokens, "ignore_eos": True}
            client.generate_batch(prompts, **kw)  # warm-up
            t0 = time.perf_counter()
            remote = client.generate_batch(prompts, **kw)
            t_remote = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    n_remote = sum(len(r.tokens) for r in remote)
    same = sum(a.tokens == list(b.tokens) for a, b in zip(local, remote))
    res = {
        "workload": f"{len(prompts)} held-out prompts x {args.max_tokens} tokens, greedy",
        "drafter": args.drafter,
        "in_process_tokens_per_s": n_local / t_local,
        "gateway_tokens_per_s": n_remote / t_remote,
        "gateway_over_in_process": (n_remote / t_remote) / (n_local / t_local),
        "identical_outputs": f"{same}/{len(prompts)}",
    }
    print(json.dumps(res, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
