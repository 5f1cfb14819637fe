"""A verify window's cost over a decode step on the CPU, by model size (stop 38, for P3).

    LD_PRELOAD=.../libblis.so.4 BLIS_NUM_THREADS=1 PYTHONPATH=. python bench/results/s38/verify_width_cpu.py

Random fp32 qwen3 models from the default model's shape (8.4M) up to 84M parameters; mlx-lm's
KVCache with 128 tokens of context; one forward of W = 1, 2, 4 tokens, synced; medians of 60.
Would a larger default model make a speculative round cheaper relative to a decode step here,
as it would on a bandwidth-bound device? Prints one line per shape and a JSON list.
"""

from __future__ import annotations

import json
import time

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3
from mlx_lm.models.cache import make_prompt_cache

SHAPES = [(256, 10, 768, 4, 2), (384, 12, 1152, 6, 2), (512, 10, 1536, 8, 2),
          (512, 16, 1536, 8, 2), (768, 12, 2304, 12, 4)]  # fmt: skip


def run(hidden: int, layers: int, inter: int, heads: int, kv: int) -> dict:
    args = qwen3.ModelArgs(
        model_type="qwen3", hidden_size=hidden, num_hidden_layers=layers,
        intermediate_size=inter, num_attention_heads=heads, num_key_value_heads=kv, head_dim=64,
        rms_norm_eps=1e-6, vocab_size=2048, max_position_embeddings=2048, rope_theta=1e4,
        tie_word_embeddings=True,
    )  # fmt: skip
    model = qwen3.Model(args)
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    ms = {}
    for W in (1, 2, 4):
        times = []
        for _ in range(3):
            cache = make_prompt_cache(model)
            mx.eval(model(mx.zeros((1, 128), mx.int32), cache=cache)[:, -1])
            for _ in range(20):
                t0 = time.perf_counter()
                mx.eval(model(mx.zeros((1, W), mx.int32), cache=cache))
                times.append(time.perf_counter() - t0)
                for c in cache:
                    c.trim(W)  # the context stays at 128 tokens
        ms[W] = sorted(times)[len(times) // 2] * 1e3
    return {"hidden": hidden, "layers": layers, "params_m": round(params / 1e6, 1),
            "ms": {w: round(t, 2) for w, t in ms.items()}, "w4_over_w1": round(ms[4] / ms[1], 2)}  # fmt: skip


def main() -> None:
    rows = [run(*shape) for shape in SHAPES]
    for r in rows:
        print(r, flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
