"""The most a speculative round can gain for one stream on this machine, beside what the
engine gets: the single-stream ceiling of the embedded default model with its MTP head.

    python -m bench.stream_bound [--depths 1,2,3,4] [--prompts 16] --out F.json

A greedy round of depth k costs at least one (k+1)-token verify forward and k head steps
(draft 1 comes from the step that absorbs the last verify's pairs, drafts 2..k chain), and
emits 1 + its accepted drafts per row. The forward and head-step times here use mlx-lm's own
KVCache (no specfleet code: the floor any engine pays on this machine), each step synced; the
tokens per round are the engine's own on the held-out prompts at fixed depth k. So

    ceiling(k) = tokens_per_round(k) * t(1-token step) / (t(k+1-token verify) + k * t(head step))

is the decode speedup of an engine with no overhead at all. Beside it, the engine's measured
speedup over its plain decoding, decode only (prefill excluded) and end to end (as the demo's
single-stream line counts it, prefill included). Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from workers.config import DEFAULT_MODEL_DIR
from workers.drafters.mtp import MTPDrafter
from workers.engine import Engine
from workers.mtp.hidden import embed, lm_head
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

CONTEXT = 128  # tokens in the cache while a step is timed (the held-out prompts: 72-198)


def step_ms(model: object, width: int, steps: int = 60) -> float:
    """ms per synced forward of `width` tokens at B=1 with mlx-lm's KVCache."""
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([list(range(1, CONTEXT + 1))]), cache=cache))  # type: ignore[operator]
    x = mx.array([[7] * width])
    t0 = time.perf_counter()
    for _ in range(steps):
        mx.eval(mx.argmax(model(x, cache=cache)[:, -1], axis=-1))  # type: ignore[operator]
        for c in cache:
            c.offset -= width - 1  # the context grows by one token per step, as in decoding
    return (time.perf_counter() - t0) / steps * 1e3


def head_step_ms(model: object, head: object, steps: int = 60) -> float:
    """ms per synced one-token MTP head step (fc, its decoder layer, lm_head, argmax)."""
    cache = head.make_cache()  # type: ignore[attr-defined]
    H = int(model.args.hidden_size)  # type: ignore[attr-defined]
    ctx = mx.zeros((1, CONTEXT, H))
    mx.eval(head.step(ctx, embed(model, mx.zeros((1, CONTEXT), mx.int32)), cache=cache[0]))  # type: ignore[attr-defined]
    h, tok = mx.zeros((1, 1, H)), mx.array([[7]])
    t0 = time.perf_counter()
    for _ in range(steps):
        _, normed = head.step(h, embed(model, tok), cache=cache[0])  # type: ignore[attr-defined]
        mx.eval(mx.argmax(lm_head(model, normed)[:, -1], axis=-1))
    return (time.perf_counter() - t0) / steps * 1e3


def engine_run(engine: Engine, prompts: list[str], sp: SamplingParams) -> dict[str, float]:
    """One request at a time; seconds in all and in prefill, rounds and tokens."""
    engine.take_round_stats()
    t0 = time.perf_counter()
    tokens = sum(len(engine.generate([p], sp)[0].tokens) for p in prompts)
    total = time.perf_counter() - t0
    stats = engine.take_round_stats()
    return {
        "total_s": total,
        "prefill_s": sum(s.time_prefill_s for s in stats),
        "rounds": len([s for s in stats if s.batch_size]),
        "tokens": tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1,2,3,4")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    plain = Engine.load(None, drafter=None, max_batch_size=1)
    model = plain.model
    mtp = MTPDrafter.from_target(model, DEFAULT_MODEL_DIR / "target")
    prompts, sp = heldout_prompts(args.prompts), SamplingParams(max_tokens=args.max_tokens)
    depths = [int(x) for x in args.depths.split(",")]
    engines = {
        k: Engine(model, plain.tokenizer, drafter=MTPDrafter(model, mtp.head),
                  max_batch_size=1, draft_depth=k)
        for k in depths
    }  # fmt: skip
    for e in [plain, *engines.values()]:
        e.generate(prompts[:1], sp)  # warm-up
    one, head = step_ms(model, 1), head_step_ms(model, mtp.head)
    base = engine_run(plain, prompts, sp)
    rows = []
    for k, engine in engines.items():
        verify = step_ms(model, k + 1)
        run = engine_run(engine, prompts, sp)
        per_round = run["tokens"] / run["rounds"]
        decode = {n: r["total_s"] - r["prefill_s"] for n, r in (("plain", base), ("spec", run))}
        rows.append({
            "depth": k,
            "verify_ms": round(verify, 3),
            "verify_over_step": round(verify / one, 3),
            "tokens_per_round": round(per_round, 3),
            "ceiling": round(per_round * one / (verify + k * head), 3),
            "engine_decode_speedup": round(
                (run["tokens"] / decode["spec"]) / (base["tokens"] / decode["plain"]), 3),
            "engine_end_to_end_speedup": round(
                (run["tokens"] / run["total_s"]) / (base["tokens"] / base["total_s"]), 3),
            "engine_round_ms": round(decode["spec"] / run["rounds"] * 1e3, 3),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "device": str(mx.default_device()),
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "step_ms": round(one, 3),
        "head_step_ms": round(head, 3),
        "plain_engine_step_ms": round(
            (base["total_s"] - base["prefill_s"]) / base["rounds"] * 1e3, 3),
        "prefill_share_plain": round(base["prefill_s"] / base["total_s"], 3),
        "depths": rows,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "depths"}))


if __name__ == "__main__":
    main()
