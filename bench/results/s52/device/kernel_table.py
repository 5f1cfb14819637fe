"""Sum Nsight Compute's per-kernel times (kernel_split_gpu.py's CSVs, plain or gzipped) by
kernel family, side by side for two windows:

    python3 bench/results/s52/device/kernel_table.py A.csv.gz B.csv.gz
"""

from __future__ import annotations

import csv
import gzip
import re
import sys
from collections import defaultdict


def family(name: str) -> str:
    name = re.sub(r"<.*", "", name.replace("void ", "").replace("mlx::", ""))
    return name.split("(")[0].strip()[:60]


def launches(path: str) -> list[tuple[str, float]]:
    """(kernel name, us) of every launch in an `ncu --csv --metrics gpu__time_duration.sum` log."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]
    name_i, value_i = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
    return [(r[name_i], float(r[value_i].replace(",", "")) / 1e3) for r in rows[1:]]


def load(path: str) -> tuple[dict[str, float], dict[str, int]]:
    us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for name, t in launches(path):
        us[family(name)] += t
        count[family(name)] += 1
    return us, count


def main() -> None:
    (a, ca), (b, cb) = load(sys.argv[1]), load(sys.argv[2])
    print("| kernel | n A | us A | n B | us B | B - A us |\n|---|---|---|---|---|---|")
    for k in sorted(set(a) | set(b), key=lambda k: -(b.get(k, 0) - a.get(k, 0))):
        print(
            f"| {k} | {ca.get(k, 0)} | {a.get(k, 0):.0f} | {cb.get(k, 0)} | {b.get(k, 0):.0f} "
            f"| {b.get(k, 0) - a.get(k, 0):+.0f} |"
        )
    print(
        f"| total | {sum(ca.values())} | {sum(a.values()):.0f} | {sum(cb.values())} "
        f"| {sum(b.values()):.0f} | {sum(b.values()) - sum(a.values()):+.0f} |"
    )


if __name__ == "__main__":
    main()
