"""`specfleet demo`: the README's main job on the embedded default model.

Runs the shipped held-out prompts (an OpenAI Batch JSONL) through a local fleet twice with
`specfleet up --batch`: once with no drafter (the baseline) and once with the MTP drafter (the
main run, whose results, progress bar, summary and metrics URLs the user sees), then prints
the speedup. Each run is its own process with its own local Ray cluster of two workers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "workers" / "default_model" / "heldout_prompts.jsonl"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specfleet demo", description=__doc__)
    p.add_argument("--input", default=str(HELDOUT), help="batch JSONL (default: held-out prompts)")
    p.add_argument("--out-dir", default="out/demo", help="results, errors and summaries go here")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--drafter", default="mtp", help="'mtp', 'ngram' or 'model:PATH'")
    p.add_argument(
        "--draft-depth", type=int, default=3, help="the batch job's most drafts per round"
    )
    # One stream on the CPU drafts deeper than a batch: with the head's steps on the host a
    # depth-5 round cost less per token than a depth-3 one (bench/results/s43/README.md).
    p.add_argument(
        "--stream-draft-depth", type=int, default=5,
        help="the single-stream line's most drafts per round",
    )  # fmt: skip
    p.add_argument("--limit", type=int, help="only the first N requests (a shorter run)")
    p.add_argument("--no-baseline", action="store_true", help="skip the no-drafter run")
    p.add_argument(
        "--stream-prompts", type=int, default=8,
        help="held-out prompts decoded alone for the single-stream speedup (0: skip)",
    )  # fmt: skip
    return p


def _limited_input(path: Path, limit: int | None, out_dir: Path) -> Path:
    if limit is None:
        return path
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()][:limit]
    dst = out_dir / "input.jsonl"
    dst.write_text("\n".join(lines) + "\n")
    return dst


def _up_batch(args: argparse.Namespace, inp: Path, name: str, drafter: str | None) -> dict:
    out_dir = Path(args.out_dir)
    results = out_dir / f"{name}.jsonl"
    for stale in (results, out_dir / f"{name}.errors.jsonl"):
        stale.unlink(missing_ok=True)  # a demo starts over; `specfleet batch` is the resumable job
    summary = out_dir / f"{name}.summary.json"
    cmd = [sys.executable, "-m", "cluster.cli", "up", "--workers", str(args.workers),
           "--draft-depth", str(args.draft_depth), "--gateway-port", "0",
           "--batch", str(inp), "-o", str(results), "--summary-json", str(summary)]  # fmt: skip
    if drafter:
        cmd += ["--drafter", drafter]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(cmd, check=True, env=env)
    return dict(json.loads(summary.read_text()))


def _single_stream(args: argparse.Namespace) -> dict | None:
    """One request at a time, with vs without the drafter (workers/stream_speed.py), in its
    own process: the regime where speculation pays most (cluster/ never imports mlx)."""
    if args.stream_prompts <= 0:
        return None
    cmd = [sys.executable, "-m", "workers.stream_speed", "--drafter", args.drafter,
           "--prompts", str(args.stream_prompts),
           "--draft-depth", str(args.stream_draft_depth)]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    inp = _limited_input(Path(args.input), args.limit, out_dir)
    baseline = None
    if not args.no_baseline:
        print("specfleet demo: baseline run without a drafter ...", file=sys.stderr)
        baseline = _up_batch(args, inp, "baseline", None)
    print(f"specfleet demo: main run, drafter {args.drafter} ...", file=sys.stderr)
    main_run = _up_batch(args, inp, "results", args.drafter)
    print("specfleet demo: single stream, one request at a time ...", file=sys.stderr)
    stream = _single_stream(args)
    tps = float(main_run.get("tokens_per_s") or 0.0)
    lines = [
        "",
        "specfleet demo summary",
        f"  requests:          {main_run.get('num_requests')} "
        f"({main_run.get('num_failed', 0)} failed)",
        f"  tokens/s:          {tps:.1f} with drafter {args.drafter}",
        f"  acceptance rate:   {_fmt(main_run.get('acceptance_rate'), '.1%')}",
        f"  acceptance length: {_fmt(main_run.get('mean_acceptance_length'), '.2f')} "
        "tokens per target forward",
    ]
    if stream:
        lines.append(
            f"  speedup (single stream): {stream['speedup']:.2f}x "
            f"({stream['spec_tokens_per_s']:.1f} vs {stream['plain_tokens_per_s']:.1f} tokens/s, "
            f"one request at a time, {stream['requests']} requests, outputs identical "
            f"{stream['identical']})"
        )
    if baseline:
        base = float(baseline.get("tokens_per_s") or 0.0)
        speed = f"{tps / base:.2f}x ({tps:.1f} vs {base:.1f} tokens/s" if base else "n/a"
        lines.append(
            f"  speedup (batch job): {speed}, {main_run.get('num_requests')} requests on "
            f"{args.workers} workers)"
        )
    lines.append(f"  results:           {out_dir / 'results.jsonl'}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
