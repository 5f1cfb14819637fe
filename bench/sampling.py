"""Sampled speculative decoding benchmark: exact-match vs rejection vs coupled acceptance.

    .venv/bin/python -m bench.sampling [--model DIR --draft DIR] [--out bench/out/sampling.json]

For T in {0.6, 1.0} and B in {1, 8}: tokens/s, acceptance rate (accepted / drafted) and mean
acceptance length (1 + accepted / drafting rows per round, as vLLM defines it) for each
acceptance mode with the draft model, next to plain sampled decoding (drafter=None) through the
same engine on the same prompts. Uses the embedded default model when present (its draft model
and its MTP head), else a random tiny llama and a perturbed copy of it as the drafter.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from bench.engine import load_models, prompts_for
from workers import Engine, ModelDrafter, SamplingParams

MODES = ("exact", "rejection", "coupled")


def run(target, tok, drafter, prompts, temperature: float, mode: str, args) -> dict:
    engine = Engine(target, tok, drafter=drafter, max_batch_size=args.B, draft_depth=args.depth)
    params = [
        SamplingParams(
            max_tokens=args.max_tokens,
            temperature=temperature,
            seed=i,
            acceptance=mode,
            ignore_eos=True,
        )
        for i in range(len(prompts))
    ]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    dt = time.perf_counter() - t0
    stats = engine.take_round_stats()
    n = sum(len(o.tokens) for o in outs)
    decode_s = dt - sum(s.time_prefill_s for s in stats)
    drafts = sum(s.num_drafts for s in stats)
    drafted = sum(s.num_draft_tokens for s in stats)
    accepted = sum(s.num_accepted_tokens for s in stats)
    return {
        "tokens": n,
        "seconds": round(dt, 4),
        "tokens_per_s": round(n / dt, 2),
        # Without prompt prefill (identical across modes), i.e. the rounds' own speed.
        "decode_tokens_per_s": round(n / decode_s, 2),
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else 1.0,
    }


def drafter_factories(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any], str]:
    """(target, tokenizer, {drafter name: factory}, model name)."""
    from workers.default_model import TARGET_DIR, load_default

    if args.model is None and (TARGET_DIR / "model.safetensors").is_file():
        from workers.drafters.mtp import MTPDrafter

        target, tok, draft, head = load_default()
        return (
            target,
            tok,
            {"model": lambda: ModelDrafter(draft), "mtp": lambda: MTPDrafter(target, head)},
            "specfleet-default",
        )
    target, tok, draft, name = load_models(args)
    if name.startswith("random"):
        from tests.tiny import perturbed

        # A same-size random drafter cannot be faster than the target: these rows compare the
        # acceptance modes with each other, not speculation with plain decoding.
        draft = perturbed(target, args.draft_noise)
        name += f" (drafter: target + {args.draft_noise} noise)"
    if draft is None:
        raise SystemExit("bench/sampling.py needs a draft model: pass --draft DIR")
    return target, tok, {"model": lambda: ModelDrafter(draft)}, name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--draft")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--temperatures", default="0.6,1.0")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--out", default="bench/out/sampling.json")
    ap.add_argument(
        "--draft-noise",
        type=float,
        default=0.05,
        help="random fallback only: the drafter is the target plus this much relative noise",
    )
    args = ap.parse_args()

    target, tok, drafters, model_name = drafter_factories(args)
    vocab = int(target.args.vocab_size)
    results: dict = {
        "model": model_name,
        "machine": f"{platform.machine()} {platform.processor() or ''} {mx.default_device()}",
        "max_tokens": args.max_tokens,
        "draft_depth": args.depth,
        "rows": [],
    }
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        args.B = B
        prompts = prompts_for(tok, max(args.prompts, B), vocab)
        for T in [float(t) for t in args.temperatures.split(",")]:
            configs = [("none", None, "rejection")] + [
                (name, make, mode) for name, make in drafters.items() for mode in MODES
            ]
            for drafter_name, make, mode in configs:
                # Best of 3 passes (the first warms kernels up; CPUs may be shared).
                passes = []
                for _ in range(3):
                    drafter = None if make is None else make()
                    passes.append(run(target, tok, drafter, prompts, T, mode, args))
                r = min(passes, key=lambda p: p["seconds"])
                r.update(
                    batch_size=B,
                    temperature=T,
                    drafter=drafter_name,
                    mode="plain" if make is None else mode,
                )
                results["rows"].append(r)
                print(json.dumps(r))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
