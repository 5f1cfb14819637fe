"""Stop 59: summarise contended A/B files (bench/results/s50/contended_ab_cpu.sh): per tag,
plain's job time over the tag's in each rep (a pair's time is its slower worker's) and the
median, then each drafting arm's rounds by depth per worker.

    python bench/results/s59/cpu/ab_summary.py FILE.jsonl [FILE.jsonl ...]
"""

import json
import statistics
import sys

rows = [json.loads(line) for path in sys.argv[1:] for line in open(path)]
by_rep: dict[tuple[str, int], dict[str, float]] = {}
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        by_rep.setdefault((path, r["rep"]), {})[r["tag"]] = max(r["a"]["wall"], r["b"]["wall"])
for key in [k for k, v in by_rep.items() if "plain" not in v]:
    print(f"skipped {key}: no plain pair", file=sys.stderr)
    del by_rep[key]
for tag in sorted({r["tag"] for r in rows} - {"plain"}):
    ratios = [v["plain"] / v[tag] for v in by_rep.values() if tag in v]
    print(tag, [round(x, 3) for x in ratios], "median", round(statistics.median(ratios), 3))
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if r["tag"] != "plain" and not r["tag"].removeprefix("b-").startswith("k"):
            print(path, r["rep"], r["tag"], r["a"]["depths"], r["b"]["depths"])
