"""Quantized KV cache (EngineConfig.kv_bits): memory, admission, speed and greedy agreement.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 OPENBLAS_NUM_THREADS=1 \\
        .venv/bin/python -m bench.kv_quant        # -> bench/results/kv_quant_cpu.json

On the embedded default model (Engine.load; fp32 on the CPU), for kv_bits None / 8 / 4:
- KV bytes per token, measured from the cache's arrays (and the same arithmetic for the fp16
  the checkpoint ships in, and a Qwen3-8B-shape bf16 model), and the largest batch x context
  that fits a fixed memory budget;
- admission measured: requests through an engine with a fixed kv_budget_tokens, the most rows
  that ran at once;
- decode tokens/s at B = 1 and 8 (rounds after the first; wall time and, because other jobs
  share these cores, tokens per CPU-second of this process), configurations interleaved;
- greedy agreement of 8 and 4 bits with the unquantized cache over the 64 held-out prompts, and
  speculative (MTP head) == plain with the same kv_bits on them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import mlx.core as mx

from workers import Engine, SamplingParams
from workers.config import DEFAULT_MODEL_DIR
from workers.kv_quant import AttentionDims, KVQuant, attention_dims, kv_bytes_per_token

BITS: list[int | None] = [None, 8, 4]
GIB = 2**30


def heldout() -> list[tuple[str, int]]:
    lines = (DEFAULT_MODEL_DIR / "heldout_prompts.jsonl").read_text().splitlines()
    bodies = [json.loads(x)["body"] for x in lines if x.strip()]
    return [(b["prompt"], int(b["max_tokens"])) for b in bodies]


def label(bits: int | None) -> str:
    return "none" if bits is None else str(bits)


def memory(engines: dict[int | None, Engine], group: int, budget_gib: float) -> dict:
    """Bytes per token from the arrays of a running batch, and what a budget holds."""
    out: dict = {"budget_gib": budget_gib, "group_size": group, "models": {}}
    e0 = engines[None]
    prompts = [p for p, _ in heldout()[:4]]
    measured = {}
    for bits, e in engines.items():
        for i, p in enumerate(prompts):
            e.add_request(f"m{i}", p, SamplingParams(max_tokens=8))
        e.step()  # prefill + first round: rows running, arrays allocated
        keys = e.cache.layers[0].keys  # type: ignore[attr-defined]
        slots = keys.shape[0] * keys.shape[2]  # the arrays' rows, spare ones too (cache_rows.py)
        measured[label(bits)] = sum(a.nbytes for a in e.cache.state_arrays()) / slots
        while e.has_work():
            e.step()
        assert measured[label(bits)] == e.kv_bytes_per_token
    dims = attention_dims(e0.model, e0.cache.recurrent)
    assert dims is not None
    ctx = e0.max_context
    shapes = {
        "default model, fp32 (as run on the CPU)": dims,
        "default model, fp16 (as shipped; a Mac GPU)": [
            AttentionDims(d.key_dim, d.value_dim, d.num_heads, 2) for d in dims
        ],
        # 36 layers, 8 KV heads x 128 dims, bf16: arithmetic only (not run here)
        "Qwen3-8B shape, bf16 (arithmetic)": [AttentionDims(1024, 1024, 8, 2)] * 36,
    }
    for name, ds in shapes.items():
        row = {}
        base = kv_bytes_per_token(ds, None)
        head_dim = ds[0].key_dim // ds[0].num_heads
        settings = [(None, group), (8, group), (4, group)]
        if head_dim % 128 == 0 and group != 128:  # wider groups: fewer scales per slot
            settings += [(8, 128), (4, 128)]
        for bits, g in settings:
            per = kv_bytes_per_token(ds, KVQuant(bits, g) if bits is not None else None)
            tokens = int(budget_gib * GIB // per)
            row[label(bits) if g == group else f"{label(bits)}_g{g}"] = {
                "bytes_per_token": per,
                "tokens_in_budget": tokens,
                "rows_at_context": tokens // ctx,
                "context_at_8_rows": tokens // 8,
                "tokens_vs_unquantized": base / per,
            }
        out["models"][name] = row
    out["context"] = ctx
    out["measured_bytes_per_token"] = measured
    return out


def admission(budget_tokens: int, n: int, max_tokens: int) -> dict:
    """The most rows that ran at once, each request reserving prompt + max_tokens tokens."""
    prompts = [p for p, _ in heldout()[:n]]
    out = {}
    for bits in BITS:
        e = Engine.load(kv_bits=bits, max_batch_size=n, kv_budget_tokens=budget_tokens)
        e.generate(prompts, SamplingParams(max_tokens=max_tokens))
        widest = max(s.batch_size for s in e.take_round_stats())
        out[label(bits)] = {"kv_budget_tokens": e.kv_budget, "most_rows_at_once": widest}
    return {"kv_budget_tokens_unquantized": budget_tokens, "requests": n, "by_bits": out}


def decode_speed(engine: Engine, prompts: list[str], max_tokens: int) -> tuple[float, float]:
    """(tokens/s wall, tokens per CPU-second) over the rounds after the first one."""
    engine.config.max_batch_size = len(prompts)
    for i, p in enumerate(prompts):
        engine.add_request(f"s{i}", p, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    engine.step()  # prefill + first round: not timed
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while engine.has_work():
        n += sum(len(ev.new_tokens) for ev in engine.step())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    engine.take_round_stats()
    return n / wall, n / cpu


def speed(engines: dict[int | None, Engine], batch_sizes: list[int], reps: int, max_tokens: int):
    prompts = [p for p, _ in heldout()]
    runs: dict = {str(B): {label(b): {"wall": [], "cpu": []} for b in engines} for B in batch_sizes}
    for _ in range(reps):  # interleaved: each rep runs every configuration once
        for B in batch_sizes:
            for bits, e in engines.items():
                wall, cpu = decode_speed(e, prompts[:B], max_tokens)
                runs[str(B)][label(bits)]["wall"].append(wall)
                runs[str(B)][label(bits)]["cpu"].append(cpu)
    out: dict = {"max_tokens": max_tokens, "reps": reps, "runs": runs, "median": {}}
    for B, by in runs.items():
        med = {k: {m: statistics.median(v[m]) for m in ("wall", "cpu")} for k, v in by.items()}
        for k in med:
            for m in ("wall", "cpu"):
                med[k][f"{m}_vs_unquantized"] = med[k][m] / med["none"][m]
        out["median"][B] = med
    return out


def agreement(n: int, batch: int, group: int, spec_prompts: int) -> dict:
    """Greedy outputs with a quantized cache vs the unquantized one (held-out prompts, each at
    its own max_tokens), and speculative (MTP head) vs plain with the same quantized cache."""
    items = heldout()[:n]
    prompts = [p for p, _ in items]
    params = [SamplingParams(max_tokens=m) for _, m in items]
    ref = [o.tokens for o in Engine.load(max_batch_size=batch).generate(prompts, params)]
    result: dict = {"prompts": n, "by_bits": {}}
    settings = [(8, group), (4, group)] + ([(4, 32)] if group != 32 else [])
    for bits, g in settings:
        plain = Engine.load(kv_bits=bits, kv_group_size=g, max_batch_size=batch)
        got = [o.tokens for o in plain.generate(prompts, params)]
        prefix = [common_prefix(a, b) for a, b in zip(got, ref)]
        row = {
            "identical": sum(a == b for a, b in zip(got, ref)),
            "mean_common_prefix_fraction": statistics.mean(
                p / max(len(b), 1) for p, b in zip(prefix, ref)
            ),
            "token_agreement": sum(prefix) / sum(len(b) for b in ref),
        }
        if g == group:
            spec = Engine.load(drafter="mtp", kv_bits=bits, kv_group_size=g, max_batch_size=batch)
            mtp = [o.tokens for o in spec.generate(prompts[:spec_prompts], params[:spec_prompts])]
            stats = spec.take_round_stats()
            row["mtp_speculative_equals_plain"] = sum(a == b for a, b in zip(mtp, got))
            row["mtp_prompts"] = spec_prompts
            row["mtp_acceptance"] = sum(s.num_accepted_tokens for s in stats) / max(
                1, sum(s.num_draft_tokens for s in stats)
            )
        result["by_bits"][label(bits) if g == group else f"{label(bits)}_g{g}"] = row
    return result


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--budget-gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--agreement-prompts", type=int, default=64)
    ap.add_argument("--spec-prompts", type=int, default=16)
    ap.add_argument("--out", default="bench/results/kv_quant_cpu.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    engines = {b: Engine.load(kv_bits=b, kv_group_size=args.group_size) for b in BITS}
    result = {
        "machine": f"{platform.machine()} {platform.system()}, {mx.default_device()}"
        + (", 2 cores shared with other jobs" if mx.default_device() == mx.cpu else ""),
        "model": "embedded default model (qwen3, 10 layers, 2 KV heads x 64 dims), fp32 on CPU, "
        "fp16 on a GPU",
        "memory": memory(engines, args.group_size, args.budget_gib),
        "admission": admission(budget_tokens=1024, n=16, max_tokens=16),
        "speed": speed(
            engines, [int(b) for b in args.batch_sizes.split(",")], args.reps, args.max_tokens
        ),  # fmt: skip
        "agreement": agreement(args.agreement_prompts, 16, args.group_size, args.spec_prompts),
    }
    result["elapsed_s"] = time.perf_counter() - t0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("memory", "admission")}, indent=1))
    print(json.dumps(result["speed"]["median"], indent=1))
    print(json.dumps(result["agreement"], indent=1))


if __name__ == "__main__":
    main()
