"""Stop 54: kernel_micro_alternated_ncu.csv.gz (kernel_ab_gpu.py micro --n 2 --passes 2 under
Nsight Compute) as a table: per shape, each form's launches timed one at a time (µs, median of
the six timed launches), and which form went first. A shape's launches run in this order: one
check call of each form (after, before), then six of the form going first, six of the other
(micro alternates which goes first, shape by shape).

    python bench/results/s54/device/micro_ncu_table.py bench/results/s54/device/kernel_micro_alternated_ncu.csv.gz
"""

import csv
import gzip
import io
import statistics
import sys

text = gzip.open(sys.argv[1], "rt").read()
rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"') :])))
seq = [
    ("after" if "ragged_window_attention" in r["Kernel Name"] else "before", float(r["Metric Value"].replace(",", "")) / 1e3)
    for r in rows
    if r["Metric Name"] == "gpu__time_duration.sum"
    and ("ragged_window_attention" in r["Kernel Name"] or "window_attention_before" in r["Kernel Name"])
]  # fmt: skip
shapes = [(B, S, W) for B in (1, 8) for S in (133, 512) for W in (1, 5, 8)]
print(
    "| B | slots | W | first | after µs | before µs | after ÷ before |\n|---|---|---|---|---|---|---|"
)
i = 0
for n, (B, S, W) in enumerate(shapes):
    block = seq[i : i + 14]
    i += 14
    timed = block[2:]
    first = timed[0][0]
    t = {f: statistics.median(us for g, us in timed if g == f) for f in ("after", "before")}
    assert {g for g, _ in timed[:6]} == {first} and first == ("after" if n % 2 == 0 else "before")
    print(
        f"| {B} | {S} | {W} | {first} | {t['after']:.1f} | {t['before']:.1f} | {t['after'] / t['before']:.2f} |"
    )
