"""GPU benchmark (MLX CUDA build on a lent NVIDIA GPU, or Metal on a Mac).

    python bench/gpu.py --out $OUT/gpu.json

1. A randomly initialised ~1B-parameter Qwen3-shaped model (bf16): tokens/s of plain batched
   decode through the engine and of mlx-lm's BatchGenerator for B = 1..64, and of speculative
   decoding with forced acceptance (a drafter that proposes exactly what the target will say,
   so every draft is accepted: the throughput ceiling of a round); plus the time of one
   K+1-token verify forward over one 1-token decode forward.
2. The embedded default model, if present: the engine benchmark (bench/engine.py) rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.engine import run_batch_generator
from bench.forced_drafter import DeviceForcedDrafter
from workers import Engine, SamplingParams, launch, row_linear, skinny_linear, stacked_linears
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache


def qwen3_model(hidden: int = 2048, layers: int = 16, vocab: int = 32000):
    from mlx.utils import tree_map
    from mlx_lm.models import qwen3

    args = qwen3.ModelArgs(
        model_type="qwen3",
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=3 * hidden,
        num_attention_heads=hidden // 128 or 1,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=128,
        rms_norm_eps=1e-6,
        vocab_size=vocab,
        max_position_embeddings=8192,
        rope_theta=1e6,
        tie_word_embeddings=True,
    )
    mx.random.seed(0)
    model = qwen3.Model(args)
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    # Random init gives near-uniform logits, where bf16 noise flips argmaxes; a larger
    # (tied) embedding makes them peaked, like a trained model's.
    model.model.embed_tokens.weight = model.model.embed_tokens.weight * 12
    mx.eval(model.parameters())
    n = sum(v.size for _, v in __import__("mlx.utils").utils.tree_flatten(model.parameters()))
    return model, n


def verify_ratio(model, B: int, K: int, ctx: int = 128, reps: int = 10) -> float:
    """Seconds of one [B, K+1] forward over one [B, 1] forward, same cache length."""
    vocab = model.args.vocab_size
    rng = np.random.default_rng(0)
    times = {}
    for W in (1, K + 1):
        cache = BatchCache.for_model(model, B)
        prefill(model, cache, [rng.integers(0, vocab, ctx).tolist() for _ in range(B)], 512)
        tokens, valid = pad_windows([rng.integers(0, vocab, W).tolist() for _ in range(B)])
        mx.eval(forward_window(model, cache, tokens, valid))  # warm-up
        t0 = time.perf_counter()
        for _ in range(reps):
            mx.eval(forward_window(model, cache, tokens, valid))
        times[W] = (time.perf_counter() - t0) / reps
    return times[K + 1] / times[1]


def routed_verify_ratio(model, B: int, K: int, on: bool) -> float:
    """verify_ratio with workers/skinny_linear.py installed where the engine would (on) or not."""
    (skinny_linear.install if on else skinny_linear.remove)(model)
    return verify_ratio(model, B, K)


def route_off(make, undo):
    """An engine maker whose engine runs without a route (the A/B's off side: `undo`, e.g.
    skinny_linear.remove): engines install routes on the shared model when built, so each pass
    sets its own state."""

    def made():
        engine = make()
        undo(engine.model)
        return engine

    return made


def env_off(make, env: str):
    """An engine maker whose engine is built with `env` set to "0" (the A/B's off side of a
    setting read at construction, e.g. workers/launch.py's launcher thread, or the stacked
    linears, which an engine built without them undoes on the shared model: routes.install)."""

    from bench.peers import env_set

    def made():
        with env_set(env, "0"):
            return make()

    return made


AB_UNDO = {"skinny": skinny_linear.remove, "views": row_linear.remove_views}
AB_ENV = {
    "launch": launch.ENV,
    "stacked": stacked_linears.ENV,
    "skinny_wide": skinny_linear.WIDE_ENV,
}


def measure(
    model,
    vocab: int,
    B: int,
    max_tokens: int,
    depth: int,
    rng,
    repeats: int = 3,
    ab: str | None = None,
) -> dict:
    """One batch size: plain engine (pipelined and one round at a time), BatchGenerator, and
    forced acceptance with a device-resident drafter (the zero-cost, always-right drafter).

    Each configuration runs once untimed (CUDA builds kernels and graphs per shape), then
    `repeats` timed passes, the configurations taking turns; the figures are medians. Single
    passes of a B=1 job (0.2-0.5 s) moved plain ÷ BatchGenerator from 0.86 to 1.90 between two
    runs on the same H200."""
    prompts = [rng.integers(0, vocab, size=int(rng.integers(16, 64))).tolist() for _ in range(B)]
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    plain = Engine(model, None, max_batch_size=B).generate(prompts, sp)  # untimed, and the refs
    refs = {tuple(p): o.tokens for p, o in zip(prompts, plain)}

    # --ab-deep: the on side runs two pipelined rounds in flight, the off side one
    deep = {"pipeline_depth": 2} if ab == "deep" else {}

    def forced(**kw: int) -> Engine:
        d = DeviceForcedDrafter(refs, vocab=vocab)
        return Engine(model, None, drafter=d, max_batch_size=B, draft_depth=depth, **kw)

    makers = {
        "plain": lambda: Engine(model, None, max_batch_size=B, **deep),
        "sync": lambda: Engine(model, None, max_batch_size=B, pipeline=False),
        "forced": lambda: forced(**deep),
    }
    if ab:  # the same configurations with the route `ab` off (AB_UNDO), taking turns with them;
        # forced rounds one at a time too, where the device's time adds to the host's
        undo = AB_UNDO.get(ab)

        def off(make):
            if ab == "deep":  # the off side: one round in flight, the engine's default
                plain = make is makers["plain"]
                return (lambda: Engine(model, None, max_batch_size=B)) if plain else make
            return env_off(make, AB_ENV[ab]) if undo is None else route_off(make, undo)

        def forced_sync() -> Engine:
            d = DeviceForcedDrafter(refs, vocab=vocab)
            return Engine(model, None, drafter=d, max_batch_size=B, draft_depth=depth,
                          pipeline=False)  # fmt: skip

        makers |= {
            "plain_off": off(makers["plain"]),
            "forced_off": off(forced),
            "forced_sync": forced_sync,
            "forced_sync_off": off(forced_sync),
        }
    tokens_per_s: dict[str, list[float]] = {k: [] for k in [*makers, "bg"]}
    last: dict = {}
    for rep in range(repeats + 1):  # pass 0 is the untimed warm-up of each configuration
        for name, make in makers.items():
            engine = make()
            t0 = time.perf_counter()
            outs = engine.generate(prompts, sp)
            dt = time.perf_counter() - t0
            if rep:
                tokens_per_s[name].append(sum(len(o.tokens) for o in outs) / dt)
            last[name] = (outs, engine)
        bg = run_batch_generator(model, prompts, max_tokens, B)["tokens_per_s"]
        if rep:
            tokens_per_s["bg"].append(bg)
    med = {k: float(np.median(v)) for k, v in tokens_per_s.items()}
    ab_rows = {}
    if ab:
        ab_rows = {
            "plain_on_over_off": med["plain"] / med["plain_off"],
            "forced_on_over_off": med["forced"] / med["forced_off"],
            "plain_off_over_batch_generator": med["plain_off"] / med["bg"],
            "forced_sync_on_over_off": med["forced_sync"] / med["forced_sync_off"],
        }
    spec, engine = last["forced"]
    outs = last["plain"][0]
    drafts = sum(o.num_draft_tokens for o in spec)
    accepted = sum(o.num_accepted_tokens for o in spec)
    # Tokens each row emits per round (forced: ~depth + 1, less where budgets clamp depth).
    stats = [s for s in engine.take_round_stats() if s.batch_size]
    per_round = sum(s.num_generated_tokens for s in stats) / sum(s.batch_size for s in stats)
    speedup = med["forced"] / med["bg"]
    return {
        "repeats": repeats,
        "engine_plain_tokens_per_s": med["plain"],
        "engine_plain_sync_tokens_per_s": med["sync"],
        "mlx_lm_batch_generator_tokens_per_s": med["bg"],
        "plain_over_batch_generator": med["plain"] / med["bg"],
        "engine_forced_accept_tokens_per_s": med["forced"],
        "forced_acceptance_rate": accepted / max(1, drafts),
        "tokens_per_round": per_round,
        "forced_over_batch_generator": speedup,
        # Efficiency: the speedup a round delivers over what its tokens would allow if a
        # (K+1)-token verify cost one decode step (the bandwidth-bound ideal).
        "efficiency": speedup / per_round,
        "rows_identical_to_plain": f"{sum(a.tokens == b.tokens for a, b in zip(spec, outs))}/{B}",
        **ab_rows,
        "verify_over_decode_time": routed_verify_ratio(model, B, depth, on=True),
        **(
            {"verify_over_decode_time_off": routed_verify_ratio(model, B, depth, on=False)}
            if ab == "skinny"
            else {}
        ),  # fmt: skip
        "tokens_per_s_each_pass": {k: [round(x, 1) for x in v] for k, v in tokens_per_s.items()},
    }


PRESETS = {
    "tiny": (256, 2),
    "1b": (2048, 16),
    "6b": (4096, 32),
}  # hidden size, layers (Qwen3 shapes, bf16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/gpu.json")
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--presets", default="1b,6b")
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per configuration")
    ab_route = ap.add_mutually_exclusive_group()
    ab_route.add_argument(
        "--ab-skinny",
        action="store_true",
        help="also run plain and forced with workers/skinny_linear.py off, in turns",
    )
    ab_route.add_argument(
        "--ab-launch",
        action="store_true",
        help="also run plain and forced with workers/launch.py's launcher thread off, in turns",
    )
    ab_route.add_argument(
        "--ab-stacked",
        action="store_true",
        help="also run plain and forced with workers/stacked_linears.py off, in turns",
    )
    ab_route.add_argument(
        "--ab-skinny-wide",
        action="store_true",
        help="also run plain and forced with skinny_linear's wide route off, in turns",
    )
    ab_route.add_argument(
        "--ab-deep",
        action="store_true",
        help="also run plain and forced with one pipelined round in flight against two, in turns",
    )
    ab_route.add_argument(
        "--ab-views",
        action="store_true",
        help="also run plain and forced with row_linear's held weight views off, in turns",
    )
    args = ap.parse_args()
    ab = "skinny" if args.ab_skinny else "views" if args.ab_views else None
    ab = "launch" if args.ab_launch else "stacked" if args.ab_stacked else ab
    ab = "skinny_wide" if args.ab_skinny_wide else "deep" if args.ab_deep else ab
    if args.ab_views:
        os.environ[row_linear.VIEW_ENV] = "1"  # engines install them; the off side removes them
    if args.ab_skinny:
        os.environ[skinny_linear.ENV] = "1"  # engines install it; the off side removes it
    if args.ab_skinny_wide:
        os.environ[skinny_linear.WIDE_ENV] = "1"  # off by default: on here, "0" on the off side

    res: dict = {
        "device": str(mx.default_device()),
        "machine": platform.node(),
        "max_tokens": args.max_tokens,
        "draft_depth": args.depth,
        "models": {},
    }
    for preset in args.presets.split(","):
        model, n_params = qwen3_model(*PRESETS[preset])
        entry: dict = {"model": f"random qwen3, {n_params / 1e9:.2f}B params, bf16", "rows": {}}
        res["models"][preset] = entry
        rng = np.random.default_rng(1)
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            row = measure(model, 32000, B, args.max_tokens, args.depth, rng, args.repeats, ab)
            entry["rows"][str(B)] = row
            print(
                f"{preset} B={B}",
                json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
                flush=True,
            )
        del model
        mx.clear_cache()

    default = Path(__file__).resolve().parents[1] / "workers/default_model/target/config.json"
    if default.exists() and not args.skip_default:
        import subprocess
        import sys

        out = Path(args.out).with_name("gpu_engine_default.json")
        subprocess.run(
            [sys.executable, "bench/engine.py", "--out", str(out), "--batch-sizes", "1,4,8,16,32"],
            check=False,
        )
        if out.exists():
            res["embedded_default"] = json.loads(out.read_text())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
