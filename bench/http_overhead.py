"""HTTP overhead: the same greedy workload through the OpenAI-compatible HTTP API, the gRPC
gateway, and an in-process Engine, on the embedded default model, in one run.

    .venv/bin/python bench/http_overhead.py [--out bench/results/http_overhead_cpu.json]

Starts `specfleet up --workers 1 --http-port 0` as a subprocess. The HTTP path sends every
prompt at once from a thread pool through the official `openai` SDK (plain and streamed); the
gRPC path sends them in one `Client.generate_batch`. Each path runs once to warm up, then the
paths take turns for --reps rounds and each reports its median (the cores are shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def start_fleet(drafter: str, depth: int, batch: int) -> tuple[subprocess.Popen, str, str]:
    cmd = [
        sys.executable, "-m", "cluster.cli", "up", "--workers", "1", "--gateway-port", "0",
        "--http-port", "0", "--drafter", drafter, "--draft-depth", str(depth),
        "--max-batch-size", str(batch),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.time() + 240
    gateway = http = None
    for line in proc.stderr:
        if m := re.search(r"^gateway:\s+(\S+)", line):
            gateway = m.group(1)
        if m := re.search(r"^http \(OpenAI/Anthropic\): (\S+)", line):
            http = m.group(1)
        if "serving" in line and gateway and http:
            return proc, gateway, http
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("specfleet up did not come up")


def interleaved(paths: dict[str, Any], reps: int) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Each path once to warm up, then `reps` rounds running every path in turn; a path's time
    is its median, so load from other jobs on the shared cores hits every path alike."""
    outs = {name: fn() for name, fn in paths.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(reps):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return outs, times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", default="mtp")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (median taken)")
    ap.add_argument("--out", default="bench/results/http_overhead_cpu.json")
    args = ap.parse_args()

    import openai

    from cluster import Client
    from workers import Engine, SamplingParams
    from workers.default_model import HELDOUT_PROMPTS

    lines = [json.loads(x) for x in HELDOUT_PROMPTS.read_text().splitlines() if x.strip()]
    prompts = [ln["body"]["prompt"] for ln in lines][: args.prompts]
    n_tok = args.max_tokens

    engine = Engine.load(drafter=args.drafter, draft_depth=args.depth, max_batch_size=args.batch)
    sp = SamplingParams(max_tokens=n_tok, ignore_eos=True)
    proc, gateway, base_url = start_fleet(args.drafter, args.depth, args.batch)
    try:
        client = Client(gateway)
        kw = {"max_tokens": n_tok, "ignore_eos": True}
        oa = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=600)
        body: dict[str, Any] = {"model": "specfleet-default", "max_tokens": n_tok,
                                "temperature": 0, "extra_body": {"ignore_eos": True}}  # fmt: skip

        def plain(p: str) -> list[int]:
            r = oa.completions.create(prompt=p, **body)
            return list(r.model_extra["specfleet"]["token_ids"])  # type: ignore[index]

        def streamed(p: str) -> str:
            return "".join(
                c.choices[0].text for c in oa.completions.create(prompt=p, stream=True, **body)
            )

        with ThreadPoolExecutor(len(prompts)) as pool:
            outs, t = interleaved(
                {
                    "in_process": lambda: engine.generate(prompts, sp),
                    "grpc_gateway": lambda: client.generate_batch(prompts, **kw),
                    "http_openai": lambda: list(pool.map(plain, prompts)),
                    "http_openai_sse": lambda: list(pool.map(streamed, prompts)),
                },
                args.reps,
            )
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    local, grpc_out, http_out, sse_out = outs.values()

    total = len(prompts) * n_tok
    rate = {name: total / statistics.median(secs) for name, secs in t.items()}
    same_grpc = sum(a.tokens == list(b.tokens) for a, b in zip(local, grpc_out))
    same_http = sum(a.tokens == b for a, b in zip(local, http_out))
    same_sse = sum(r.text == s for r, s in zip(grpc_out, sse_out))
    res = {
        "workload": f"{len(prompts)} held-out prompts x {n_tok} tokens, greedy, all at once; "
        f"median of {args.reps} interleaved rounds",
        "model": "embedded default (specfleet-default)",
        "drafter": args.drafter,
        "draft_depth": args.depth,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, shared (noisy)",
        "tokens_per_s": rate,
        "round_times_s": {name: [round(x, 3) for x in secs] for name, secs in t.items()},
        "http_over_grpc": rate["http_openai"] / rate["grpc_gateway"],
        "http_over_in_process": rate["http_openai"] / rate["in_process"],
        "http_sse_over_grpc": rate["http_openai_sse"] / rate["grpc_gateway"],
        "grpc_over_in_process": rate["grpc_gateway"] / rate["in_process"],
        "identical_tokens_grpc_vs_in_process": f"{same_grpc}/{len(prompts)}",
        "identical_tokens_http_vs_in_process": f"{same_http}/{len(prompts)}",
        "identical_text_sse_vs_grpc": f"{same_sse}/{len(prompts)}",
    }
    print(json.dumps(res, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
