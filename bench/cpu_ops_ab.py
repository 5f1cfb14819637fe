"""The CPU's fewer-node routes on and off in one process, beside mlx-lm's BatchGenerator.

    python -m bench.cpu_ops_ab [--batch-sizes 1,8] [--repeats 4] [--max-tokens 32] --out F.json

`on`: the engine as it is (workers/cpu_ops.py: RoPE tables once per forward, RMSNorm and
attention broadcasts kept; workers/row_linear.py: linears read a transposed view made once).
`off`: the same engine with every such route undone (SPECFLEET_CPU_OPS=0,
SPECFLEET_VIEW_LINEAR=0, the model's modules as mlx-lm built them). Plain decoding and the MTP
head at depth 4, embedded default model, the configurations taking turns each pass; the first
pass is dropped (graph and buffer warm-up). Medians of each pass's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import mlx.core as mx

from bench.engine import prompts_for, run_batch_generator, run_engine
from workers import cpu_ops, row_linear
from workers.config import DEFAULT_MODEL_DIR
from workers.drafters.mtp import MTPDrafter
from workers.loading import upcast_on_cpu
from workers.routes import as_mlx_lm_built


@contextmanager
def routes_off(model):
    """Engines (and MTP heads) made inside build mlx-lm's graphs: no route installed, and the
    shared target's modules as mlx-lm built them."""
    off = {cpu_ops.ENV: "0", row_linear.VIEW_ENV: "0"}
    with patch.dict(os.environ, off), as_mlx_lm_built(model):
        yield


def head(name: str, model):
    """A fresh drafter per engine (it holds its rows' state), made under the current switches."""
    return MTPDrafter.from_target(model, DEFAULT_MODEL_DIR / "target") if name == "mtp" else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--out", default="bench/out/cpu_ops_ab.json")
    args = ap.parse_args()
    from mlx_lm import load

    model, tok = load(str(DEFAULT_MODEL_DIR / "target"))[:2]
    upcast_on_cpu(model)
    prompts = prompts_for(tok, args.prompts, int(model.args.vocab_size))
    runs: dict[str, list[float]] = {}
    for rep in range(args.repeats + 1):
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            tps = {"bg": run_batch_generator(model, prompts, args.max_tokens, B)["tokens_per_s"]}
            for name in ("plain", "mtp"):
                on = run_engine(
                    model, tok, head(name, model), prompts, args.max_tokens, B, args.depth
                )
                with routes_off(model):
                    off = run_engine(model, tok, head(name, model), prompts, args.max_tokens, B,
                                     args.depth)  # fmt: skip
                tps[f"{name}_on"], tps[f"{name}_off"] = on["tokens_per_s"], off["tokens_per_s"]
            if rep:  # pass 0 warms every shape
                for k, v in tps.items():
                    runs.setdefault(f"B={B} {k}", []).append(round(v, 1))
            print(f"pass {rep} B={B}: " + ", ".join(f"{k} {v:.0f}" for k, v in tps.items()),
                  flush=True)  # fmt: skip
    summary = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        r = {k.split(" ", 1)[1]: v for k, v in runs.items() if k.startswith(f"B={B} ")}

        def ratio(a: str, b: str, r: dict = r) -> float:
            return statistics.median(x / y for x, y in zip(r[a], r[b]))

        summary[f"B={B}"] = {
            "plain_on_over_off": round(ratio("plain_on", "plain_off"), 3),
            "mtp_on_over_off": round(ratio("mtp_on", "mtp_off"), 3),
            "plain_on_over_batch_generator": round(ratio("plain_on", "bg"), 3),
            "plain_off_over_batch_generator": round(ratio("plain_off", "bg"), 3),
            "mtp_on_over_plain_on": round(ratio("mtp_on", "plain_on"), 3),
            "mtp_off_over_plain_off": round(ratio("mtp_off", "plain_off"), 3),
        }
        print(f"B={B}: {json.dumps(summary[f'B={B}'])}", flush=True)
    Path(args.out).write_text(json.dumps({
        "device": str(mx.default_device()), "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "blas": os.environ.get("LD_PRELOAD", "bundled"), "command": "python -m bench.cpu_ops_ab "
        f"--batch-sizes {args.batch_sizes} --repeats {args.repeats} --max-tokens {args.max_tokens}",
        "summary": summary, "tokens_per_s_each_pass": runs}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
