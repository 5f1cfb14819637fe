"""Medians of the ragged window kernel's launch times in window_warps_ncu.sh's CSVs, by
(window W, warps NW, keys ahead U):

    python3 bench/results/s52/device/ww_table.py bench/results/s52/device/flushed/*.csv.gz
"""

from __future__ import annotations

import re
import statistics
import sys

from kernel_table import launches  # this folder's: run as a script, the folder is on the path


def main() -> None:
    for path in sys.argv[1:]:
        times: dict[tuple[int, ...], list[float]] = {}
        for name, t in launches(path):
            # ..._bfloat16_t_<W>_<HQ>_<HK>_<D>_<NW>[_<U>]: U is 1 where the name has none
            pattern = r"ragged_window_attention_bfloat16_t_(\d+)_\d+_\d+_\d+_(\d+)_?(\d*)"
            if m := re.search(pattern, name):
                key = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 1))
                times.setdefault(key, []).append(t)
        print(path, "(W, NW, U): us")
        for key, ts in sorted(times.items()):
            print(f"  {key}: {statistics.median(ts):.1f}")


if __name__ == "__main__":
    main()
