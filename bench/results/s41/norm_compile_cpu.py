"""Stop 41 (not kept): the CPU's RMSNorm route (workers/cpu_ops.py ViewRMSNorm, 8 graph nodes a
call) as one compiled function ("fused", 3 nodes) or as two ("split": the rsqrt on [..., 1],
then x * r * w: 4 nodes), against ops, in turns in one process (2-core CPU, default model).

    PYTHONPATH=. python bench/results/s41/norm_compile_cpu.py B PAIRS

Prints whether every output equals the ops route's (it must: same bits), then per engine (plain,
MTP at fixed depth 3) each variant's tokens/s ÷ ops per pair and the medians.
"""

from __future__ import annotations

import statistics
import sys
import time

import mlx.core as mx

from workers import cpu_ops
from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

OPS = cpu_ops.ViewRMSNorm.__call__


@mx.compile
def fused(x: mx.array, w: mx.array, inv_n: mx.array, eps: mx.array) -> mx.array:
    return (x * mx.rsqrt(mx.sum(mx.square(x), axis=-1, keepdims=True) * inv_n + eps)) * w


@mx.compile
def _inv_rms(s: mx.array, inv_n: mx.array, eps: mx.array) -> mx.array:
    return mx.rsqrt(s * inv_n + eps)


@mx.compile
def _scale(x: mx.array, r: mx.array, w: mx.array) -> mx.array:
    return (x * r) * w


def split(x: mx.array, w: mx.array, inv_n: mx.array, eps: mx.array) -> mx.array:
    return _scale(x, _inv_rms(mx.sum(mx.square(x), axis=-1, keepdims=True), inv_n, eps), w)


_consts: dict[tuple, tuple[mx.array, mx.array]] = {}


def route(fn):  # type: ignore[no-untyped-def]
    def call(self, x):  # type: ignore[no-untyped-def]
        w = self["weight"]
        if x.dtype != mx.float32 or w.dtype != mx.float32 or not cpu_ops.on_cpu():
            return OPS(self, x)
        key = (x.shape[-1], self.eps)
        if key not in _consts:  # the fallback's float32 scalars 1/n and eps
            _consts[key] = (mx.array(1.0 / x.shape[-1], mx.float32), mx.array(self.eps, mx.float32))
        return fn(x, w, *_consts[key])

    return call


def main() -> None:
    B, pairs = int(sys.argv[1]), int(sys.argv[2])
    variants = {"ops": OPS, "fused": route(fused), "split": route(split)}
    plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=True)
    drafter = make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model)
    spec = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=B,
                  draft_depth=3, adaptive_depth=False, warm_up=True)  # fmt: skip
    engines = {"plain": plain, "mtp": spec}
    prompts = heldout_prompts(8 if B == 1 else 2 * B)
    sp = SamplingParams(max_tokens=40)
    outs, rates = {}, {}
    for v, call in variants.items():
        cpu_ops.ViewRMSNorm.__call__ = call
        for name, engine in engines.items():
            outs[name, v] = [o.tokens for o in engine.generate(prompts, sp)]
    print("identical:", all(o == outs["plain", "ops"] for o in outs.values()))
    for _ in range(pairs):
        for v, call in variants.items():
            cpu_ops.ViewRMSNorm.__call__ = call
            for name, engine in engines.items():
                t0 = time.perf_counter()
                done = engine.generate(prompts, sp)
                tokens = sum(len(o.tokens) for o in done)
                rates.setdefault((name, v), []).append(tokens / (time.perf_counter() - t0))
    for name in engines:
        for v in ("fused", "split"):
            r = [a / b for a, b in zip(rates[name, v], rates[name, "ops"])]
            print(f"B={B} {name} {v}/ops median {statistics.median(r):.3f} "
                  f"pairs {[round(x, 2) for x in r]}")  # fmt: skip
        medians = {v: round(statistics.median(rates[name, v]), 1) for v in variants}
        print(f"B={B} {name} tok/s medians", medians)


if __name__ == "__main__":
    main()
