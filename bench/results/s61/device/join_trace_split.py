"""Stop 61: where an MTP pass's time goes against a plain pass's, step by step, on MLX CUDA:
join steps (a joiner's prefill started, advanced or ended in them), the two steps after each
join, steady steps, and the steps in which the MTP head's compiled step traced a new shape
(workers/compiled_step.py) with how many traces each made.

    python bench/results/s61/device/join_trace_split.py MODEL_DIR B PROMPTS REPS OUT.json [VARIANTS]

VARIANTS (default `plain,mtp`): also `mtp_pwN`, the MTP engine with the head reading a joiner's
last N prompt pairs (MTPDrafter.prompt_window, 64 as landed): pw0 skips the head's prompt
pass at a join, the bound on what a cheaper one could save.

Engines as bench/adaptive_trace.py builds them (warm-up; MTP with the depth policy, cap 4),
served traffic (96 tokens +- 50%, held-out prompts, greedy). Each rep runs a plain pass and an
MTP pass (or one pass of each variant), the order rotating a place each rep. Rep 0 of fresh engines includes their cold builds.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import count_head_traces, log_steps, step_classes
from workers import Engine

model_dir, B, n_prompts, reps, out = (
    Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
)  # fmt: skip
variants = (sys.argv[6] if len(sys.argv) > 6 else "plain,mtp").split(",")
prompts = heldout_prompts(model_dir, n_prompts)
sp = spread_params(len(prompts), 96, 0.5)


def load(variant: str) -> Engine:
    if variant == "plain":
        return Engine.load(model_dir, max_batch_size=B, warm_up=True)
    engine = Engine.load(model_dir, drafter="mtp", max_batch_size=B, draft_depth=4,
                         adaptive_depth=True, warm_up=True)  # fmt: skip
    if variant.startswith("mtp_pw"):
        engine.drafter.prompt_window = int(variant.removeprefix("mtp_pw"))  # type: ignore[union-attr]
    return engine


engines = {v: load(v) for v in variants}
made = count_head_traces()


def one_pass(engine: Engine) -> dict:
    steps = log_steps(engine)
    traces: list[int] = []
    real_step = engine.step

    def step() -> list:
        before = made[0]
        events = real_step()
        traces.append(made[0] - before)
        return events

    engine.step = step  # type: ignore[method-assign]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    wall = time.perf_counter() - t0
    del engine.step  # the class's again (log_steps's wrapper sat on the instance too)
    kinds = step_classes(steps, traces)
    split = {}
    for kind in ("join", "after_join", "trace", "steady"):
        ms = [1e3 * s.seconds for s, k in zip(steps, kinds) if k == kind]
        split[kind] = {"steps": len(ms), "total_ms": round(sum(ms), 1),
                       "median_ms": round(statistics.median(ms), 3) if ms else None}  # fmt: skip
    tokens = sum(len(o.tokens) for o in outs)
    return {
        "tokens_per_s": round(tokens / wall, 1), "wall_ms": round(1e3 * wall, 1),
        "steps": len(steps), "traces": sum(traces),
        "join_steps_with_traces": sum(1 for k, t in zip(kinds, traces) if k == "join" and t),
        "split": split,
        "step_ms": [[round(1e3 * s.seconds, 2), int(s.prefilled), t] for s, t in zip(steps, traces)],
    }  # fmt: skip


result: dict = {"model_dir": str(model_dir), "B": B, "prompts": n_prompts,
                "device": str(mx.default_device()), "mlx": mx.__version__, "reps": []}  # fmt: skip
for rep in range(reps):
    order = variants[rep % len(variants) :] + variants[: rep % len(variants)]
    r = {name: one_pass(engines[name]) for name in order}
    r["ratio"] = {v: round(r[v]["tokens_per_s"] / r["plain"]["tokens_per_s"], 3)
                  for v in variants if v != "plain" and "plain" in r}  # fmt: skip
    result["reps"].append(r)
    for n in order:
        brief = {k: v for k, v in r[n].items() if k not in ("step_ms", "tokens_per_s")}
        split = " ".join(f"{k} {v['steps']}x{v['median_ms']}={v['total_ms']}"
                         for k, v in brief.pop("split").items())  # fmt: skip
        print(f"B={B} rep{rep} {n}: {r[n]['tokens_per_s']} tok/s {json.dumps(brief)} {split}")
    print(f"B={B} rep{rep} ratio {r['ratio']}", flush=True)
    out.write_text(json.dumps(result, indent=1))
