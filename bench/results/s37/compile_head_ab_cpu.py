"""plain vs MTP (head steps as ops) vs MTP (compiled head steps), B rows, in turns, one process."""
import sys, time, statistics
from pathlib import Path
from bench.peers import heldout_prompts
from bench.p5_pairs import spread_params
from workers import Engine
from workers.kv_cache import SPAN
md = Path("workers/default_model/target")
B = int(sys.argv[1]); n = int(sys.argv[2]); reps = int(sys.argv[3]); adaptive = sys.argv[4] == "1"
prompts = heldout_prompts(md, n)
sp = spread_params(n, 64, 0.5)
plain = Engine.load(str(md), max_batch_size=B)
ops = Engine.load(str(md), drafter="mtp", max_batch_size=B, draft_depth=3, adaptive_depth=adaptive)
comp = Engine.load(str(md), drafter="mtp", max_batch_size=B, draft_depth=3, adaptive_depth=adaptive)
comp.drafter.compile_steps()
engines = {"plain": plain, "ops": ops, "comp": comp}
def run(e):
    t0 = time.perf_counter(); outs = e.generate(prompts, sp); s = time.perf_counter() - t0
    return sum(len(o.tokens) for o in outs) / s, [list(o.tokens) for o in outs], s
for k, e in engines.items():
    t = run(e)[2]; print("warm", k, round(t, 2), flush=True)
res = {k: [] for k in engines}
for rep in range(reps):
    for name, e in engines.items():
        tps, outs, _ = run(e); res[name].append(tps)
        if name == "plain": ref = outs
        else: assert outs == ref, name
    print(rep, {k: round(v[-1], 1) for k, v in res.items()}, flush=True)
m = {k: statistics.median(v) for k, v in res.items()}
print(f"B={B} adaptive={adaptive} ratio to plain", {k: round(v / m["plain"], 3) for k, v in m.items()})
from workers import compiled_step; print("traces", len(compiled_step._TRACES))
