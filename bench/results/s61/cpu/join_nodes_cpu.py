"""Stop 61: graph nodes per engine step, by step class (join, the two steps after a join,
steady), plain against MTP, with the engine set up as on MLX CUDA (Backend.builds_per_shape,
compiled head steps, per-row linears) but run on the CPU: node counts, not times, carry over.
The H200 split (device/join_trace_split.py) showed MTP's join steps cost ~2x plain's extra.

    SPECFLEET_COMPILE_DRAFT=1 SPECFLEET_ROW_LINEAR=1 SPECFLEET_LAUNCH_THREAD=0 \\
        python bench/results/s61/cpu/join_nodes_cpu.py MODEL_DIR B PROMPTS
"""

import collections
import json
import statistics
import sys
from pathlib import Path

import workers.backend as backend
from bench.graph_ops import Counter
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import log_steps
from workers import Engine

backend.Backend.current = classmethod(  # type: ignore[method-assign]
    lambda cls: cls(builds_per_shape=True, computes_in_launch=False)
)
model_dir, B, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
prompts = heldout_prompts(model_dir, n)
sp = spread_params(len(prompts), 96, 0.5)
out = {}
for name, kw in (("plain", {}), ("mtp", {"drafter": "mtp", "draft_depth": 4})):
    engine = Engine.load(model_dir, max_batch_size=B, **kw)
    engine.generate(prompts, sp)  # warm
    steps = log_steps(engine)
    nodes: list[tuple[int, collections.Counter]] = []
    real = engine.step

    def step(_real=real, _nodes=nodes):  # type: ignore[no-untyped-def]
        with Counter() as c:
            events = _real()
        _nodes.append((c.ops, c.by_name))
        return events

    engine.step = step  # type: ignore[method-assign]
    engine.generate(prompts, sp)
    kinds, since = [], 99
    for s in steps:
        since = 0 if s.prefilled else since + 1
        kinds.append("join" if s.prefilled else "after_join" if since <= 2 else "steady")
    res = {}
    for kind in ("join", "after_join", "steady"):
        ops = [o for (o, _), k in zip(nodes, kinds) if k == kind]
        names: collections.Counter = collections.Counter()
        for (_, c), k in zip(nodes, kinds):
            if k == kind:
                names.update(c)
        res[kind] = {"steps": len(ops), "median_nodes": statistics.median(ops) if ops else None,
                     "mean_nodes": round(sum(ops) / len(ops), 1) if ops else None,
                     "by_name_mean": {k: round(v / len(ops), 1)
                                      for k, v in names.most_common(25)}}  # fmt: skip
    out[name] = res
    print(name, json.dumps({k: {x: y for x, y in v.items() if x != "by_name_mean"}
                            for k, v in res.items()}), flush=True)  # fmt: skip
Path("bench/results/s61/cpu/join_nodes_cpu.json").write_text(json.dumps(out, indent=1))
