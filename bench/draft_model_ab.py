"""A draft model's rounds pipelined against read back one at a time, in one process.

    python -m bench.draft_model_ab [--batch-sizes 1,8] [--pairs 4] [--out F.json]

The embedded default model and its draft model (fixed depth), greedy, the held-out prompts.
Per batch size, each repeat runs plain decoding, the draft model with pipelined rounds (the
drafter device-resident: workers/drafters/model.py) and the draft model with `pipeline=False`
(every round read back before the next is built: how the draft model ran before it was
device-resident, less the wait for its drafts that it also had), in turn; medians of the
per-repeat ratios. Outputs are compared with plain decoding's (greedy: the same tokens, up to
near-tie flips in half precision).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import mlx.core as mx

from bench.engine import load_models, prompts_for, run_engine
from workers import ModelDrafter


class Unpadded(ModelDrafter):
    """Windows as wide as their tokens: the engine's rounding to 8 on MLX CUDA is ignored."""

    @property  # type: ignore[override]
    def pad_packed_to(self) -> int:
        return 1

    @pad_packed_to.setter
    def pad_packed_to(self, value: int) -> None:
        pass


def measure(target, tok, configs: dict, prompts: list, B: int, args) -> dict:
    """Each configuration's tokens/s over `args.pairs` repeats taken in turn (after one
    untimed warm-up each), and the medians of the per-repeat ratios."""

    def run(cfg: str) -> dict:
        make, pipeline = configs[cfg]
        drafter = make() if make else None
        return run_engine(target, tok, drafter, prompts, args.max_tokens, B, args.depth,
                          pipeline=pipeline)  # fmt: skip

    for cfg in configs:  # warm: kernels and graphs of every shape
        run(cfg)
    runs: dict[str, list[dict]] = {cfg: [] for cfg in configs}
    for _ in range(args.pairs):
        for cfg in configs:
            runs[cfg].append(run(cfg))
    tps = {cfg: [r["tokens_per_s"] for r in rs] for cfg, rs in runs.items()}

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(tps[a], tps[b]))

    return {
        "tokens_per_s": {cfg: [round(x, 1) for x in v] for cfg, v in tps.items()},
        "pipelined_over_synced": ratio("draft_pipelined", "draft_synced"),
        "pipelined_over_plain": ratio("draft_pipelined", "plain"),
        "synced_over_plain": ratio("draft_synced", "plain"),
        "acceptance_length": runs["draft_pipelined"][0]["mean_acceptance_length"],
        **(
            {"unpadded_over_padded": ratio("draft_pipelined_unpadded", "draft_pipelined")}
            if "draft_pipelined_unpadded" in configs
            else {}
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--draft")
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--unpadded", action="store_true", help="also: windows not rounded to 8")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    target, tok, draft, name = load_models(args)
    assert draft is not None, "no draft model next to the target (--draft DIR)"
    vocab = int(target.args.vocab_size)
    configs = {
        "plain": (None, True),
        "draft_pipelined": (lambda: ModelDrafter(draft), True),
        "draft_synced": (lambda: ModelDrafter(draft), False),
    }
    if args.unpadded:
        configs["draft_pipelined_unpadded"] = (lambda: Unpadded(draft), True)
    rows = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        prompts = prompts_for(tok, max(args.prompts, B), vocab)
        rows[str(B)] = r = measure(target, tok, configs, prompts, B, args)
        print(f"B={B}: pipelined / synced {r['pipelined_over_synced']:.2f}, pipelined / plain "
              f"{r['pipelined_over_plain']:.2f}, synced / plain {r['synced_over_plain']:.2f}, "
              f"acceptance length {r['acceptance_length']:.2f}, unpadded / padded "
              f"{r.get('unpadded_over_padded', float('nan')):.2f}", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({
            "model": name, "device": str(mx.default_device()), "mlx": mx.__version__,
            "max_tokens": args.max_tokens, "depth": args.depth, "prompts": args.prompts,
            "batch": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
