"""The engine with one-token steps attending by row length (workers/attention_cuda.py) against
the same engine with that route off (masked attention), MLX CUDA, in one process.

    python bench/ragged_route.py 6b,1b        # writes $OUT/route2.json where $OUT is set

Per preset and B in (8, 32): one step's logits both ways on ragged rows (20-299 tokens of
context; how many layers were routed, largest difference, argmax agreement), then plain
decoding of B random prompts (64 new tokens), kernel / mask / BatchGenerator taking turns,
4 passes with the first dropped; medians of the ratios.
"""

import json
import os
import sys

import mlx.core as mx
import numpy as np

from bench.engine import run_batch_generator, run_engine
from bench.gpu import qwen3_model
from workers import attention_cuda
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache

out = {}
real = attention_cuda.ragged_window_attention
calls = [0]


def counted(*a, **k):
    calls[0] += 1
    return real(*a, **k)


attention_cuda.ragged_window_attention = counted
orig_init = BatchCache.__init__


def init_off(self, *a, **kw):  # the same engine with the kernel route off
    orig_init(self, *a, **kw)
    self.kernel_attention = False


for preset in sys.argv[1].split(","):
    model, _ = qwen3_model(*{"1b": (2048, 16), "6b": (4096, 32)}[preset])
    rng = np.random.default_rng(0)
    res = {}
    for B in (8, 32):
        cache = BatchCache.for_model(model, B)
        prefill(
            model,
            cache,
            [rng.integers(0, 32000, int(rng.integers(20, 300))).tolist() for _ in range(B)],
            512,
        )
        tokens, valid = pad_windows([[int(rng.integers(0, 32000))] for _ in range(B)])
        calls[0] = 0
        a = forward_window(model, cache, tokens, valid).astype(mx.float32)
        mx.eval(a)
        routed = calls[0]
        cache.kernel_attention = False
        b = forward_window(model, cache, tokens, valid).astype(mx.float32)
        mx.eval(b)
        res[f"B{B}_logits"] = dict(
            routed_calls=routed,
            max_abs_diff=float(mx.max(mx.abs(a - b))),
            argmax_agree=float(mx.mean(mx.argmax(a, -1) == mx.argmax(b, -1))),
        )
        prompts = [
            rng.integers(0, 32000, size=int(rng.integers(16, 64))).tolist() for _ in range(B)
        ]
        T = {"bg": [], "kernel": [], "mask": []}
        for rep in range(4):
            bg = run_batch_generator(model, prompts, 64, B)["tokens_per_s"]
            k = run_engine(model, None, None, prompts, 64, B, 4)
            BatchCache.__init__ = init_off
            m = run_engine(model, None, None, prompts, 64, B, 4)
            BatchCache.__init__ = orig_init
            if rep:
                T["bg"].append(bg)
                T["kernel"].append(k["tokens_per_s"])
                T["mask"].append(m["tokens_per_s"])
        bgv = np.array(T["bg"])
        res[f"B{B}"] = {
            "kernel_over_bg": float(np.median(np.array(T["kernel"]) / bgv)),
            "mask_over_bg": float(np.median(np.array(T["mask"]) / bgv)),
            "kernel_over_mask": float(np.median(np.array(T["kernel"]) / np.array(T["mask"]))),
            "passes": {k: [round(x, 1) for x in v] for k, v in T.items()},
        }
        print(preset, B, json.dumps(res[f"B{B}_logits"]), json.dumps(res[f"B{B}"]), flush=True)
    out[preset] = res
if os.environ.get("OUT"):
    json.dump(out, open(os.path.join(os.environ["OUT"], "route2.json"), "w"), indent=1)
