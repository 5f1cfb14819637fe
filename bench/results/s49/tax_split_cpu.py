"""Stop 49: what the adaptive MTP engine loses against plain on one worker's share of the demo's
batch job (32 held-out prompts, B=16, 64 tokens), split: engines built as a serving worker
builds them (warm-up, prefix cache on), fresh for every pass (a worker's first job), in turns:

- plain: no drafter;
- adaptive: MTP, depth up to 3, the policy as served;
- held0: the same engine with the policy held at depth 0 after its warm-up (what having the
  head attached costs: its hidden, the policy's host work, waits where the batch changes);
- no_explore: adaptive without the every-16th-round exploration;
- explore_settled: for the rule tried in tried/no_explore_where_settled.patch (no drafting
  depth explored at a batch size settled on plain): with the patch applied, `adaptive` runs
  that rule and this variant the rule before it (`settled_plain` reads False inside `choose`
  only; without the patch the two are the same code).

argv 3 picks the engines (comma-separated; default the first four).

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/tax_split_cpu.py PASSES OUT.json
"""

import gc
import json
import statistics
import sys
import time

from bench.turns import demo_worker_engine
from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts

NAMES = ("plain", "adaptive", "held0", "no_explore")


def explore_settled(policy: object) -> None:
    """`choose` as before this stop: settled_plain is False while it runs (joins still ask)."""
    choose, settled = policy.choose, policy.settled_plain  # type: ignore[attr-defined]
    inside = [False]

    def choosing(batch_size: int) -> int:
        inside[0] = True
        try:
            return choose(batch_size)
        finally:
            inside[0] = False

    policy.choose = choosing  # type: ignore[attr-defined]
    policy.settled_plain = lambda b: False if inside[0] else settled(b)  # type: ignore[attr-defined]


def make(name: str) -> Engine:
    if name == "plain":
        return demo_worker_engine(None)
    engine = demo_worker_engine("mtp")
    policy = engine.depth_policy
    assert policy is not None
    if name == "held0":
        policy.forced = 0
    elif name == "no_explore":
        policy.explore_every = 0
    elif name == "explore_settled":
        explore_settled(policy)
    return engine


def main() -> None:
    passes, out = int(sys.argv[1]), sys.argv[2]
    names = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else NAMES
    prompts = heldout_prompts(32)
    sp = SamplingParams(max_tokens=64)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for p in range(passes):
        for name in names if p % 2 == 0 else names[::-1]:
            engine = make(name)
            engine.take_round_stats()
            t0 = time.perf_counter()
            outs = engine.generate(prompts, sp)
            dt = time.perf_counter() - t0
            stats = engine.take_round_stats()
            runs[name].append({
                "seconds": round(dt, 3),
                "tokens": sum(len(o.tokens) for o in outs),
                "prefill_s": round(sum(s.time_prefill_s for s in stats), 3),
                "rounds": sum(1 for s in stats if s.batch_size),
                "drafting_rounds": sum(1 for s in stats if s.draft_depth),
                "drafted_tokens": sum(s.num_draft_tokens for s in stats),
            })  # fmt: skip
            print(p, name, runs[name][-1], flush=True)
            del engine
            gc.collect()
    plain = [r["seconds"] for r in runs["plain"]]
    ratios = {n: [round(b / r["seconds"], 3) for b, r in zip(plain, runs[n])] for n in names[1:]}
    summary = {n: statistics.median(v) for n, v in ratios.items()}
    json.dump({"runs": runs, "over_plain": ratios, "median_over_plain": summary},
              open(out, "w"), indent=1)  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
