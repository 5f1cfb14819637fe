"""Stop 50: contended_steps_cpu.jsonl per worker: seconds, steps and ms a step by category
(prefill steps apart; rounds by batch size and depth), and each job's prefill steps split
into the prefill itself and the rest of the step.

    python bench/results/s50/contended_steps_table.py bench/results/s50/contended_steps_cpu.jsonl
"""

import collections
import json
import sys

for line in open(sys.argv[1]):
    pair = json.loads(line)
    for worker in ("a", "b"):
        run = pair[worker]
        cats: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
        prefill_s = rest_s = 0.0
        for dt, rows, depth, tokens, host_prefill in run["steps"]:
            if tokens or host_prefill > 0.001:
                cat = "prefill"
                prefill_s += host_prefill
                rest_s += dt - host_prefill
            else:
                cat = f"{'B>=14' if rows >= 14 else 'B<14'} d{depth}"
            cats[cat][0] += dt
            cats[cat][1] += 1
        print(
            pair["rep"],
            run["name"],
            worker,
            f"job {run['wall']:.2f} s",
            {c: (round(s, 2), int(n), round(s / n * 1e3, 1)) for c, (s, n) in sorted(cats.items())},
            f"prefill steps: prefill {prefill_s:.2f} s, rest {rest_s:.2f} s",
        )
