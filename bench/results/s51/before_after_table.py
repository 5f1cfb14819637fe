"""Stop 51: the before/after table of bench/before_after_cpu.sh's files (vs_2955616/).

python bench/results/s51/before_after_table.py bench/results/s51/vs_2955616
"""

import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = {
    "plain ÷ BatchGenerator (P1)": ("engine", "specfleet_plain"),
    "MTP depth 4 ÷ BatchGenerator": ("engine", "specfleet_mtp"),
    "adaptive MTP ÷ BatchGenerator": ("engine", "specfleet_mtp_adaptive"),
    "efficiency, tiny Qwen3 (no head)": ("gpu", "efficiency"),
    "tiny plain ÷ BatchGenerator": ("gpu", "plain_over_batch_generator"),
}


def figure(side: str, p: int, kind: str, key: str, b: str) -> float:
    if kind == "engine":
        d = json.loads((out / f"engine_{side}_{p}.json").read_text())["batch"]["T=0.0"][b]
        return d[key]["speedup_vs_mlx_lm"]
    d = json.loads((out / f"gpu_tiny_{side}_{p}.json").read_text())
    return d["models"]["tiny"]["rows"][b][key]


print("| measure, B = 1 / 8 | before (passes 1, 2) | after (passes 1, 2) |")
print("|---|---|---|")
for name, (kind, key) in rows.items():
    cells = []
    for side in ("before", "after"):
        per_b = [", ".join(f"{figure(side, p, kind, key, b):.2f}" for p in (1, 2)) for b in "18"]
        cells.append(" / ".join(per_b))
    print(f"| {name} | {cells[0]} | {cells[1]} |")
demo = out / "demo_ab.json"
if demo.exists():
    print(json.dumps(json.loads(demo.read_text()), indent=1)[:1500])
