"""Stop 58: what joins cost a contended batch job (bench/results/s50/contended_ab_cpu.sh's
JSON lines): steps that prefilled against the steady steps beside them.

    python bench/results/s58/join_table.py FILE.jsonl
"""

import json
import statistics
import sys


def split(steps: list) -> dict:
    """steps: (seconds, rows, depth, prefill tokens, host prefill seconds) per engine step."""
    join = [i for i, s in enumerate(steps) if s[3] > 0 or s[4] > 0]
    steady = [i for i, s in enumerate(steps) if s[3] == 0 and s[4] == 0 and s[1] > 0]
    extra = []
    for i in join:
        near = [steps[j][0] for j in steady if abs(j - i) <= 4 and steps[j][2] == steps[i][2]]
        if near:
            extra.append(steps[i][0] - statistics.median(near))
    wall = sum(s[0] for s in steps)
    return {
        "steps": len(steps),
        "join_steps": len(join),
        "join_s": round(sum(steps[i][0] for i in join), 3),
        "join_extra_s": round(sum(extra), 3),
        "join_extra_ms_median": round(1e3 * statistics.median(extra), 1) if extra else None,
        "prefill_host_s": round(sum(s[4] for s in steps), 3),
        "wall_s": round(wall, 3),
        "steady_ms_median": round(1e3 * statistics.median(steps[i][0] for i in steady), 1),
    }


for line in open(sys.argv[1]):
    rec = json.loads(line)
    for half in ("a", "b"):
        print(rec["rep"], rec["tag"], half, json.dumps(split(rec[half]["steps"])))
