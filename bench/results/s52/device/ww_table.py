"""Medians of the ragged window kernel's launch times in window_warps_ncu.sh's CSVs, by
(window W, warps NW, keys ahead U):

    python3 bench/results/s52/device/ww_table.py bench/results/s52/device/flushed/*.csv.gz
"""

from __future__ import annotations

import csv
import gzip
import re
import statistics
import sys


def main() -> None:
    for path in sys.argv[1:]:
        with gzip.open(path, "rt") as f:
            rows = [r for r in csv.reader(f) if len(r) > 10]
        name_i, value_i = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
        times: dict[tuple[int, ...], list[float]] = {}
        for r in rows[1:]:
            # ..._bfloat16_t_<W>_<HQ>_<HK>_<D>_<NW>[_<U>]: U is 1 where the name has none
            m = re.search(
                r"ragged_window_attention_bfloat16_t_(\d+)_\d+_\d+_\d+_(\d+)_?(\d*)", r[name_i]
            )
            if m:
                key = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 1))
                times.setdefault(key, []).append(float(r[value_i].replace(",", "")) / 1e3)
        print(path, "(W, NW, U): us")
        for key, t in sorted(times.items()):
            print(f"  {key}: {statistics.median(t):.1f}")


if __name__ == "__main__":
    main()
