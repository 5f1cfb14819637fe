"""Would a re-balanced default model reach P3's 1.8x single stream on this CPU? The ceiling of
a depth-k MTP round for target shapes of about the default model's size, timed here.

    python -m bench.shape_ceiling [--shapes 10x256x768,16x192x576,...] --out F.json

For each shape (layers x hidden x MLP width; heads of 64 or 32 wide, 1 or 2 KV heads) a random
fp32 qwen3 target and a one-layer MTP head of its width are built and timed with mlx-lm's own
KVCache as bench/stream_bound.py times the shipped one: a 1-token step, a (k+1)-token verify
and one head step, each synced, 128 tokens of context. Weights do not change these times, so
the ceiling at an assumed tokens per round T(k) is T(k) * t(step) / (t(verify) + k t(head)):
the decode speedup of an engine with no overhead at all. T is the shipped model's own (2.6 at
depth 3, 2.9 at depth 4, bench/results/stream_bound_cpu.json and its eval.json): a deeper
target of the same size may accept a little more or less, which the table does not guess.
The demo's single-stream line also counts prefill (12% of plain decoding's time on the
held-out prompts), which the ceiling leaves out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3

from bench.stream_bound import head_step_ms, step_ms
from workers.config import DEFAULT_MODEL_DIR
from workers.mtp.qwen35 import MTPArgs, MTPHead

TOKENS_PER_ROUND = {3: 2.6, 4: 2.9}  # the shipped model's, at depth 3 and 4


def build(layers: int, hidden: int, inter: int) -> tuple[object, object, int]:
    base = json.loads((DEFAULT_MODEL_DIR / "target" / "config.json").read_text())
    head_dim = 64 if hidden % 64 == 0 else 32
    heads = hidden // head_dim
    cfg = dict(base, num_hidden_layers=layers, hidden_size=hidden, intermediate_size=inter,
               head_dim=head_dim, num_attention_heads=heads,
               num_key_value_heads=2 if heads % 2 == 0 else 1)  # fmt: skip
    model = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    head = MTPHead(MTPArgs.from_target_config(cfg))
    for m in (model, head):
        m.set_dtype(mx.float32)
        mx.eval(m.parameters())
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    return model, head, params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="10x256x768,16x192x576,20x192x512,24x160x480,16x256x768")
    ap.add_argument("--repeats", type=int, default=2, help="timings per shape; the last is kept")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        layers, hidden, inter = (int(v) for v in shape.split("x"))
        model, head, params = build(layers, hidden, inter)
        for _ in range(args.repeats):  # the first pass warms the allocator and caches
            one = step_ms(model, 1)
            verify = {k: step_ms(model, k + 1) for k in TOKENS_PER_ROUND}
            h = head_step_ms(model, head)
        row = {"layers": layers, "hidden": hidden, "mlp": inter, "params_m": round(params / 1e6, 2),
               "step_ms": round(one, 3), "head_over_step": round(h / one, 3)}  # fmt: skip
        for k, T in TOKENS_PER_ROUND.items():
            row[f"verify{k + 1}_over_step"] = round(verify[k] / one, 3)
            row[f"ceiling_depth{k}"] = round(T * one / (verify[k] + k * h), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"device": str(mx.default_device()), "tokens_per_round": TOKENS_PER_ROUND, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
