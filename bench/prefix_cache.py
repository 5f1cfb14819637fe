"""Prefix cache + prefix-aware placement on an evaluation-style job (issue 12).

    .venv/bin/python bench/prefix_cache.py [--requests 256 --prefix-tokens 1500] [--out FILE]

Workload: `--requests` requests over 4 distinct few-shot prefixes of `--prefix-tokens` tokens,
each followed by its own question, in shuffled order (as a batch job's lines arrive). A fleet
of 2 workers runs in this process: two engines on the embedded default model (a 10-layer
qwen3), stepped in turn; each worker's busy time is measured on its own, and the fleet's
end-to-end time is the larger of the two (real workers run in parallel; here they share the
CPU, so summing would double count). Configurations, all on the same requests:

    no_cache          prefix cache off, placement by load (alternating: equal workers)
    cache             prefix cache on, placement by load
    cache_placement   prefix cache on, prefix-aware placement (cluster/prefix_affinity.py)

each with the cache sized to hold about 2.5 prefixes per worker (`--cache-prefixes`), the
case where placement decides whether a worker's prefixes fit, and once more with room for all
4 (`--roomy`). Reported per configuration: prefill tokens computed, prefill time, end-to-end
time, hit rate; outputs are compared token for token against no_cache.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import numpy as np

from cluster.prefix_affinity import AffinityRing, prefix_key
from workers import Engine, SamplingParams
from workers.config import DEFAULT_MODEL_DIR
from workers.loading import upcast_on_cpu

NUM_PREFIXES = 4
WORKERS = ("worker-0", "worker-1")


def load_model():
    from mlx_lm import load

    model, tok = load(str(DEFAULT_MODEL_DIR / "target"))[:2]
    upcast_on_cpu(model)
    return model, tok


def workload(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(1, vocab, size=args.prefix_tokens).tolist() for _ in range(4)]
    prompts = [
        prefixes[i % NUM_PREFIXES] + rng.integers(1, vocab, size=args.question_tokens).tolist()
        for i in range(args.requests)
    ]
    random.Random(0).shuffle(prompts)
    return prompts


def place_by_load(prompts: list[list[int]]) -> list[int]:
    return [i % len(WORKERS) for i in range(len(prompts))]  # equal workers, equal requests


def place_by_prefix(prompts: list[list[int]]) -> list[int]:
    """The scheduler's rule (cluster/fleet.py PlacementRound._prefix_owner) on a static split:
    load = requests given to a worker over its fair share."""
    ring = AffinityRing()
    for w in WORKERS:
        ring.add(w)
    share = len(prompts) / len(WORKERS)
    given = dict.fromkeys(WORKERS, 0)
    out = []
    for p in prompts:
        least = min(given.values()) / share
        key = prefix_key(p)
        chosen = min(WORKERS, key=lambda w: (given[w], w))
        if key is not None:
            for w in ring.owners(key):
                if ring.within_bound(given[w] / share, least):
                    chosen = w
                    break
        given[chosen] += 1
        out.append(WORKERS.index(chosen))
    return out


def run(model, prompts, placement, cache_tokens: int, args) -> dict:
    engines = [
        Engine(model, max_batch_size=args.batch, prefix_cache_tokens=cache_tokens,
               max_context=2048, draft_depth=1)
        for _ in WORKERS
    ]  # fmt: skip
    sp = SamplingParams(max_tokens=args.max_tokens)
    for i, (p, w) in enumerate(zip(prompts, placement)):
        engines[w].add_request(f"r{i}", p, sp)
    busy = [0.0] * len(engines)
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    while any(e.has_work() for e in engines):
        for w, e in enumerate(engines):
            if e.has_work():
                t0 = time.perf_counter()
                for ev in e.step():
                    tokens[ev.request_id] += ev.new_tokens
                busy[w] += time.perf_counter() - t0
    stats = [s for e in engines for s in e.take_round_stats()]
    prompt = sum(s.num_prefill_tokens for s in stats)
    hits = sum(s.num_prefix_hit_tokens for s in stats)
    queries = sum(s.num_prefix_queried_tokens for s in stats)
    return {
        "prefill_tokens_computed": prompt - hits,
        "prompt_tokens": prompt,
        "prefill_time_s": round(sum(s.time_prefill_s for s in stats), 3),
        "end_to_end_s": round(max(busy), 3),
        "busy_s_per_worker": [round(b, 3) for b in busy],
        "hit_rate": round(hits / queries, 4) if queries else 0.0,
        "evicted_tokens": sum(s.num_prefix_evicted_tokens for s in stats),
        "requests_per_worker": [placement.count(w) for w in range(len(WORKERS))],
        "_tokens": tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prefix-tokens", type=int, default=1500)
    ap.add_argument("--question-tokens", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--cache-prefixes", type=float, default=2.5)
    ap.add_argument("--roomy", action="store_true", help="also run with room for all prefixes")
    ap.add_argument("--out", default="bench/results/prefix_cache_cpu.json")
    args = ap.parse_args()
    model, _ = load_model()
    prompts = workload(args, int(model.args.vocab_size))
    Engine(model, max_context=2048).generate([prompts[0][:64]], SamplingParams(max_tokens=2))
    per_prefix = args.prefix_tokens + args.question_tokens
    budgets = {"tight": int(args.cache_prefixes * per_prefix)}
    if args.roomy:
        budgets["roomy"] = 5 * per_prefix
    configs = {"no_cache": (place_by_load, 0)}
    for name, budget in budgets.items():
        configs[f"cache_{name}"] = (place_by_load, budget)
        configs[f"cache_placement_{name}"] = (place_by_prefix, budget)
    results = {}
    for name, (placer, budget) in configs.items():
        results[name] = run(model, prompts, placer(prompts), budget, args)
        results[name]["cache_tokens_per_worker"] = budget
        print(name, {k: v for k, v in results[name].items() if not k.startswith("_")}, flush=True)
    base = results["no_cache"]
    base_tokens = base["_tokens"]
    for r in results.values():
        r["outputs_identical_to_no_cache"] = r.pop("_tokens") == base_tokens
        r["prefill_time_speedup"] = round(
            base["prefill_time_s"] / max(r["prefill_time_s"], 1e-9), 2
        )
        r["end_to_end_speedup"] = round(base["end_to_end_s"] / r["end_to_end_s"], 2)
    out = {
        "machine": f"{platform.machine()} {platform.system()}, 2 cores shared with other jobs",
        "model": "embedded default (qwen3, 10 layers, hidden 256), fp32 on the CPU",
        "workload": vars(args),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: {m: v for m, v in r.items() if m != "busy_s_per_worker"}
                      for k, r in results.items()}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
