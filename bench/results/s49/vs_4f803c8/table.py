"""The before/after table of bench/before_after_cpu.sh's files here (4f803c8 against this tree)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
rows = []
for side in ("before", "after"):
    for p in (1, 2):
        e = json.loads((HERE / f"engine_{side}_{p}.json").read_text())["batch"]["T=0.0"]
        g = json.loads((HERE / f"gpu_tiny_{side}_{p}.json").read_text())["models"]["tiny"]["rows"]
        cells = []
        for b in ("1", "8"):
            plain = e[b]["specfleet_plain"]["speedup_vs_mlx_lm"]
            mtp = e[b]["specfleet_mtp_adaptive"]["speedup_vs_mlx_lm"]  # as served
            cells.append(f"{plain:.2f} / {mtp:.2f} / {g[b]['efficiency']:.3f}")
        rows.append(f"| {side} pass {p} | {cells[0]} | {cells[1]} |")
demo = json.loads((HERE / "demo_ab.json").read_text())["runs"]
print(
    "| tree | B = 1: plain ÷ BG / adaptive MTP ÷ BG / efficiency (tiny, forced) | B = 8: the same |"
)
print("|---|---|---|")
print("\n".join(rows))
print()
print("| tree | demo single stream | demo batch job |")
print("|---|---|---|")
for r in demo:
    print(
        f"| {r['tree']} | {r['single_stream']:.2f} ({r['single_mtp_tok_s']:.0f} vs {r['single_plain_tok_s']:.0f}) | {r['batch_job']:.2f} ({r['batch_mtp_tok_s']:.0f} vs {r['batch_plain_tok_s']:.0f}) |"
    )
