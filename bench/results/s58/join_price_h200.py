"""Stop 58: is there a fixed per-join cost to amortize on the H200? Reads stop 57's served
trace (bench/results/s57/trace_b16_d4.json: every step's ms and the prompt tokens whose prefill
finished in it, trained hybrid, MTP up to depth 4, B = 16) and prices each join as the join
step plus the step after it (a pipelined round launched behind the join pays part of it) over
two steady steps, the steady step being the median of the steps that prefilled nothing.

    python bench/results/s58/join_price_h200.py [TRACE.json]
"""

import json
import statistics
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/s57/trace_b16_d4.json"
for rep, rec in json.load(open(path)).items():
    steps = rec["mtp_steps"]  # [ms, prefill tokens]
    steady = statistics.median(ms for ms, tok in steps if tok == 0)
    runs = []  # (tokens, extra ms)
    for i, (ms, tok) in enumerate(steps[:-1]):
        if tok > 0 and steps[i + 1][1] == 0 and i > 0:  # not the first wave (nothing running)
            runs.append((tok, ms + steps[i + 1][0] - 2 * steady))
    xs, ys = [t for t, _ in runs], [e for _, e in runs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    bins = {"<160 tokens (one row)": (0, 160), "160-300 (two)": (160, 300), ">=300": (300, 10**6)}
    print(
        f"{rep}: steady {steady:.2f} ms, {len(runs)} joins, least squares extra = "
        f"{my - slope * mx:.2f} ms + {slope * 1e3:.1f} us/token"
    )
    for name, (lo, hi) in bins.items():
        e = sorted(round(y, 1) for x, y in runs if lo <= x < hi)
        if e:
            print(f"  {name}: n={len(e)} median {statistics.median(e):.1f} ms: {e}")
