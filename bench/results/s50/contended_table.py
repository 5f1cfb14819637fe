"""Stop 50: contended_ab_cpu.jsonl as a table: per configuration and rep, the pair's job time
(the slower of its two workers, as the demo's batch job ends with its last worker), the pair's
CPU seconds, and plain's job time over it (plain of the same rep and tree).

    python bench/results/s50/contended_table.py bench/results/s50/contended_ab_cpu.jsonl
"""

import collections
import json
import statistics
import sys

runs: dict = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    d = json.loads(line)
    a, b = d["a"], d["b"]
    drafting = sum(v for k, v in a["depths"].items() if k != "0") + sum(
        v for k, v in b["depths"].items() if k != "0"
    )
    rounds = sum(a["depths"].values()) + sum(b["depths"].values())
    runs[d.get("tag", a["name"])][d["rep"]] = (
        max(a["wall"], b["wall"]),
        a["cpu"] + b["cpu"],
        drafting,
        rounds,
    )
print("| config | job s (rep 1..n) | CPU s | drafting / all rounds | plain ÷ config (median) |")
print("|---|---|---|---|---|")
for name, reps in runs.items():
    base = runs["b-plain" if name.startswith("b-") and "b-plain" in runs else "plain"]
    ratios = [base[r][0] / v[0] for r, v in reps.items() if r in base]
    print(
        f"| {name} | {' / '.join(f'{v[0]:.2f}' for v in reps.values())} "
        f"| {' / '.join(f'{v[1]:.2f}' for v in reps.values())} "
        f"| {' / '.join(f'{v[2]}/{v[3]}' for v in reps.values())} "
        f"| {' / '.join(f'{x:.3f}' for x in ratios)} ({statistics.median(ratios):.3f}) |"
    )
pairs = [(n[2:], n) for n in runs if n.startswith("b-") and n[2:] in runs]
if pairs:
    print("\n| config | before ÷ after job time, per rep (median) |\n|---|---|")
for after, before in pairs:
    ratios = [runs[before][r][0] / v[0] for r, v in runs[after].items() if r in runs[before]]
    print(
        f"| {after} | {' / '.join(f'{x:.3f}' for x in ratios)} ({statistics.median(ratios):.3f}) |"
    )
