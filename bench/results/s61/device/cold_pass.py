"""Stop 61: what a warmed-up engine's first served pass still builds. fresh_prompts.py's first
pass after `warm_up` ran 3-6x slower than later ones (H200, B = 8 and 16, plain and MTP):
the warm-up (workers/warm_up.py build_shapes) misses shapes served traffic makes. Logs every
step over SLOW_MS of the first pass (and of a second, for contrast): whether it prefilled, its
rows, the depth the policy last chose, the MTP head's new traces, and the skinny kernel's new
(rows, N, K) builds (workers/skinny_linear.py: a kernel build per new key, ~2 s on an H200).

    python bench/results/s61/device/cold_pass.py MODEL_DIR B PROMPTS OUT.json [no_widths]

no_widths: the warm-up without its prefill widths (workers/warm_up.py `prefill_widths`), as
before stop 61's change.
"""

import json
import sys
import time
from pathlib import Path

import mlx.core as mx

import workers.skinny_linear as skinny
import workers.warm_up as warm_up
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import count_head_traces, log_steps
from workers import Engine

SLOW_MS = 25.0
model_dir, B, n, out = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
prompts = heldout_prompts(model_dir, n)
sp = spread_params(len(prompts), 96, 0.5)
keys: set = set()
new_keys: list = []
real_matmul = skinny.matmul


def matmul(x, w, R=None, U=None):  # type: ignore[no-untyped-def]
    key = (x.shape[0], w.shape[0], w.shape[1], str(x.dtype))
    if key not in keys:
        keys.add(key)
        new_keys.append(key)
    return real_matmul(x, w, R, U)


made = count_head_traces()
if sys.argv[5:] == ["no_widths"]:
    warm_up.prefill_widths = lambda engine, rng: []  # type: ignore[assignment]
skinny.matmul = matmul
result: dict = {"B": B, "prompts": n, "device": str(mx.default_device()), "args": sys.argv[5:]}
for name, kw in (
    ("plain", {}),
    ("mtp", {"drafter": "mtp", "draft_depth": 4, "adaptive_depth": True}),
):
    t0 = time.perf_counter()
    engine = Engine.load(model_dir, max_batch_size=B, warm_up=True, **kw)
    load_s = time.perf_counter() - t0
    warm_keys = sorted(keys)
    new_keys.clear()
    passes = []
    for p in range(2):
        steps = log_steps(engine)
        real_step = engine.step
        slow = []

        def step(_real=real_step, _steps=steps, _slow=slow, _engine=engine):  # type: ignore[no-untyped-def]
            traces, kernels = made[0], len(new_keys)
            events = _real()
            s = _steps[-1]
            if 1e3 * s.seconds > SLOW_MS:
                policy = _engine.depth_policy
                _slow.append({
                    "step": len(_steps) - 1, "ms": round(1e3 * s.seconds, 1), "rows": s.rows,
                    "prefilled": s.prefilled, "prefill_tokens": s.prefill_tokens,
                    "depth": None if policy is None else policy._last_k,
                    "traces": made[0] - traces, "skinny_new": new_keys[kernels:],
                })  # fmt: skip
            return events

        engine.step = step  # type: ignore[method-assign]
        t1 = time.perf_counter()
        outs = engine.generate(prompts, sp)
        wall = time.perf_counter() - t1
        del engine.step
        passes.append({
            "tokens_per_s": round(sum(len(o.tokens) for o in outs) / wall, 1),
            "steps": len(steps), "slow_steps": len(slow),
            "slow_ms": round(sum(x["ms"] for x in slow), 1), "slow": slow,
        })  # fmt: skip
        print(name, p, json.dumps({k: v for k, v in passes[-1].items() if k != "slow"}))
        for x in slow[:40]:
            print("   ", json.dumps(x), flush=True)
    result[name] = {"load_and_warm_up_s": round(load_s, 2), "skinny_keys_after_warm_up": warm_keys,
                    "passes": passes}  # fmt: skip
    print(name, "load+warm-up", round(load_s, 2), "s; skinny keys built by then:", warm_keys)
    out.write_text(json.dumps(result, indent=1))
