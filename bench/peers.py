"""Peers on one Qwen3.5-shape model: mlx-lm, mlx-vlm (plain / batched MTP), specfleet (plain / MTP).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 \\
    .venv/bin/python -m bench.peers [--preset cpu|1b|tiny] [--batch-sizes 1,4,8] [--depth 3]
        [--out bench/results/peers_cpu.json]

mlx-vlm is optional: `pip install --no-deps mlx-vlm==0.7.10` (its declared dependencies pull
in datasets, opencv, mlx-audio, fastapi...; the batched-MTP text path imports only mlx, numpy,
transformers and Pillow, already here). Without it the run records the import error and
measures the rest.

One process, one checkpoint (bench/peer_model.py writes it in the Hugging Face layout and each
system loads it with its own loader), the same ragged prompts and max_tokens, greedy. Per batch
size B every system runs the prompts with at most B rows at a time; repeats are interleaved
(rep 1: every B and system, rep 2: ...) so background load on the shared CPU hits all alike;
tokens/s is the median over repeats. Outputs are checked token by token against mlx-lm's
single-sequence greedy decode of the same weights; a mismatch records the position and the
reference's top-2 logprob gap there (a gap near 0 means a near-tie: numerics, not a bug).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

import mlx.core as mx
import numpy as np

from bench import peer_runners as R
from bench.peer_model import add_shape_args, build, shape_from_args

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = (
    "mlx_lm_batch_generator",
    "mlx_vlm_plain",
    "mlx_vlm_mtp",
    "mlx_vlm_mtp_noclamp",  # diagnostic: mlx-vlm with its min-accept clamp switched off
    "specfleet_plain",
    "specfleet_mtp",
    # --with-loop: specfleet with the per-position ops loop for GatedDeltaNet windows (the path
    # before the fused recurrence, workers/gdn_recurrence.py), side by side in this process
    "specfleet_plain_loop",
    "specfleet_mtp_loop",
)
BASELINE = "mlx_lm_batch_generator"
OWN_PLAIN = {
    "mlx_vlm_mtp": "mlx_vlm_plain",
    "mlx_vlm_mtp_noclamp": "mlx_vlm_plain",
    "specfleet_mtp": "specfleet_plain",
    "specfleet_mtp_loop": "specfleet_plain_loop",
}


def make_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """Ragged random prompts, lengths 4..96 spread so every batch mixes short and long rows."""
    rng = np.random.default_rng(seed)
    lengths = [4, 61, 17, 96, 33, 9, 72, 45, 25, 88, 12, 54, 6, 80, 38, 20][:n]
    lengths += rng.integers(4, 97, size=max(0, n - len(lengths))).tolist()
    return [rng.integers(0, vocab, size=int(L)).tolist() for L in lengths]


def compare(outputs: list[list[int]], ref: list[list[int]], gaps: list[list[float]]) -> dict:
    """Token identity with the reference; first mismatch per differing row and its logit gap."""
    mismatches = []
    for row, (o, g) in enumerate(zip(outputs, ref, strict=True)):
        if o != g:
            pos = next((i for i, (a, b) in enumerate(zip(o, g)) if a != b), min(len(o), len(g)))
            gap = gaps[row][pos] if pos < len(gaps[row]) else None
            mismatches.append({"row": row, "pos": pos, "ref_top2_gap": gap})
    return {
        "identical_rows": len(ref) - len(mismatches),
        "rows": len(ref),
        "mismatches": mismatches,
    }


def trained_info(model_dir: Path) -> dict[str, Any] | None:
    """peer_model.json of a checkpoint bench/peer_trained.py wrote, else None."""
    path = model_dir / "peer_model.json"
    info = json.loads(path.read_text()) if path.exists() else {}
    return info if info.get("trained") else None


def heldout_prompts(model_dir: Path, n: int) -> list[list[int]]:
    """The default model's held-out prompts (text the corpus never trained on), tokenized with
    the checkpoint's tokenizer (peer_trained.py trains on that corpus with that tokenizer)."""
    from tokenizers import Tokenizer

    from workers.stream_speed import heldout_prompts as heldout_texts

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return [tok.encode(text).ids for text in heldout_texts(n)]


def add_workload_args(ap: argparse.ArgumentParser, max_tokens: int) -> None:
    """--model-dir, --prompts, --max-tokens, --depth: a checkpoint decoding its held-out prompts
    (bench/graph_ops.py, bench/p5_pairs.py, bench/round_split.py)."""
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--depth", type=int, default=3, help="MTP drafts per round")


class Peers:
    """Loaded models and the runner for each system name."""

    def __init__(self, model_dir: Path, prompts: list[list[int]], max_tokens: int, depth: int):
        from mlx_lm import load

        self.model_dir, self.prompts, self.max_tokens, self.depth = (
            model_dir,
            prompts,
            max_tokens,
            depth,
        )
        self.mlx_lm_model = load(str(model_dir))[0]
        self.with_loop = False
        self.only: list[str] = []
        self.vlm_version, self.vlm_error = R.mlx_vlm_status()
        self.vlm: R.VlmModel | None = None
        if self.vlm_error is None:
            try:
                self.vlm = R.load_mlx_vlm(model_dir)
            except Exception as e:  # noqa: BLE001 - recorded in the report, the rest still runs
                self.vlm_error = f"load failed: {type(e).__name__}: {e}"

    def systems(self) -> list[str]:
        return [
            s
            for s in SYSTEMS
            if (self.vlm is not None or not s.startswith("mlx_vlm"))
            and (self.with_loop or not s.endswith("_loop"))
            and (not self.only or s in self.only)
        ]

    def run(self, name: str, B: int, max_tokens: int | None = None) -> R.Run:
        p, n, k = self.prompts, max_tokens or self.max_tokens, self.depth
        if name == "mlx_lm_batch_generator":
            return R.mlx_lm_batch(self.mlx_lm_model, p, n, B)
        if name.startswith("specfleet"):
            from workers.gdn_recurrence import MODE_ENV

            mode = "loop" if name.endswith("_loop") else os.environ.get(MODE_ENV, "kernel")
            with env_set(MODE_ENV, mode):
                return R.specfleet(self.model_dir, p, n, B, k, mtp="_mtp" in name)
        assert self.vlm is not None, name
        mtp, clamp = "_mtp" in name, not name.endswith("noclamp")
        return R.mlx_vlm_batch(self.vlm, p, n, B, k, mtp=mtp, clamp=clamp)


def env_set(name: str, value: str) -> contextlib.AbstractContextManager:
    """The environment variable `name` at `value` for the block, then as it was."""
    return patch.dict(os.environ, {name: value})


def warm_up(peers: Peers, batch_sizes: list[int], max_tokens: int) -> tuple[list, dict]:
    """One short run of every system at every B: compiled kernels (mx.compile) are built per
    shape. A system that fails here (e.g. a peer on a backend it does not support) is recorded
    and dropped; returns (the systems that ran, {failed system: error})."""
    names, failed = peers.systems(), {}
    for B in batch_sizes:
        for name in [n for n in names if n not in failed]:
            try:
                peers.run(name, B, max_tokens=max_tokens)
            except Exception as e:  # noqa: BLE001 - the report says which system failed and how
                failed[name] = f"B={B}: {type(e).__name__}: {e}"
                print(f"{name} failed, dropped: {failed[name]}", flush=True)
    return [n for n in names if n not in failed], failed


def summarize(runs: dict[str, list[R.Run]], ref: list[list[int]], gaps: list) -> dict[str, Any]:
    """Per system at one B: the median-speed run's stats, all speeds, identity, ratios."""
    row: dict[str, Any] = {}
    for name, rs in runs.items():
        tps = [r.tokens / r.seconds for r in rs]
        mid = sorted(rs, key=lambda r: r.tokens / r.seconds)[len(rs) // 2]
        row[name] = {
            **mid.summary(),
            "tokens_per_s": statistics.median(tps),
            "tokens_per_s_runs": [round(t, 1) for t in tps],
            "identity": compare(rs[0].outputs, ref, gaps),
            "outputs_stable_across_repeats": all(r.outputs == rs[0].outputs for r in rs),
        }
    for name, r in row.items():
        r["speedup_vs_mlx_lm"] = r["tokens_per_s"] / row[BASELINE]["tokens_per_s"]
        if OWN_PLAIN.get(name) in row:
            r["speedup_vs_own_plain"] = r["tokens_per_s"] / row[OWN_PLAIN[name]]["tokens_per_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description="peers on one Qwen3.5-shape model (see module doc)")
    add_shape_args(ap)
    ap.add_argument("--model-dir", help="checkpoint dir (default bench/out/peer_model_<preset>)")
    ap.add_argument("--batch-sizes", default="1,4,8")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--depth", type=int, default=3, help="drafts per round (both MTP systems)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "peers_cpu.json"))
    ap.add_argument("--with-loop", action="store_true", help="also specfleet with the ops loop")
    ap.add_argument("--systems", help="comma-separated subset of the systems to run")
    args = ap.parse_args()

    load_start = os.getloadavg()
    shape = shape_from_args(args)
    model_dir = Path(args.model_dir or ROOT / "bench" / "out" / f"peer_model_{args.preset}")
    t0 = time.perf_counter()
    info = trained_info(model_dir)
    if info is None:
        info = build(model_dir, shape, args.fit_steps, dtype=args.dtype)
        prompts = make_prompts(max(args.prompts, 1), shape.vocab_size)
    else:  # bench/peer_trained.py's checkpoint: real text, so held-out prompts, not random ids
        prompts = heldout_prompts(model_dir, max(args.prompts, 1))
    print(
        f"checkpoint {model_dir}: {info['target_params'] / 1e6:.1f}M target params, "
        f"{'trained' if info.get('trained') else 'random'} ({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )
    peers = Peers(model_dir, prompts, args.max_tokens, args.depth)
    peers.with_loop = args.with_loop
    if args.systems:
        peers.only = args.systems.split(",")
    if peers.vlm_error:
        print(f"mlx-vlm unavailable: {peers.vlm_error}", flush=True)
    ref, gaps = R.reference_greedy(peers.mlx_lm_model, prompts, args.max_tokens)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    names, failed = warm_up(peers, batch_sizes, min(args.max_tokens, 4 * args.depth))
    runs: dict[tuple[int, str], list[R.Run]] = {}
    for rep in range(args.repeats):  # interleaved: background load hits every system alike
        for B in batch_sizes:
            for name in names:
                runs.setdefault((B, name), []).append(peers.run(name, B))
        print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    batch = {}
    for B in batch_sizes:
        batch[str(B)] = summarize({n: runs[(B, n)] for n in names}, ref.outputs, gaps)
        print(f"B={B}: " + ", ".join(
            f"{n} {r['tokens_per_s']:.0f} tok/s"
            + (f" (acc {r['accepted_per_row_round']:.2f}/row/round)" if "rounds" in r else "")
            + ("" if not r["identity"]["mismatches"] else " NOT IDENTICAL")
            for n, r in batch[str(B)].items()), flush=True)  # fmt: skip

    results = {
        "model": {
            "dir": str(model_dir),
            "preset": info.get("recipe", {}).get("preset", args.preset),
            **info,
        },
        "machine": f"{platform.machine()} {platform.processor() or ''} {mx.default_device()}",
        "mlx": mx.__version__,
        "mlx_vlm": {
            "version": peers.vlm_version,
            "error": peers.vlm_error,
            "install": R.VLM_INSTALL,
        },
        "prompt_lengths": [len(p) for p in prompts],
        "max_tokens": args.max_tokens,
        "draft_depth": args.depth,
        "repeats": args.repeats,
        "reference_mlx_lm_generate_step_tokens_per_s": ref.tokens / ref.seconds,
        "reference_min_top2_gap": min(min(g) for g in gaps),
        # How sensitive token identity is: steps where a logit error this large could flip it.
        "reference_steps": sum(len(g) for g in gaps),
        "reference_steps_gap_below": {
            str(t): sum(x < t for g in gaps for x in g) for t in (0.01, 0.05, 0.1)
        },
        "batch": batch,
        "seconds_total": time.perf_counter() - t0,
        "load_average_start_end": [load_start, os.getloadavg()],
        "failed": failed,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out} ({results['seconds_total']:.0f}s)")


if __name__ == "__main__":
    main()
