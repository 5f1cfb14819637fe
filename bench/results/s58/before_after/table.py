import glob
import json
import re

# Stop 58: the before/after table (run from the repository root).
print("engine.py (default model, CPU fp32): tokens/s ratio vs BatchGenerator")
for t in ("before", "after"):
    for f in sorted(glob.glob(f"bench/results/s58/before_after/engine_{t}_*.json")):
        d = json.load(open(f))["batch"]["T=0.0"]
        cells = []
        for B, row in d.items():
            cells.append(
                f"B={B}: plain {row['specfleet_plain']['speedup_vs_mlx_lm']:.2f} mtp {row['specfleet_mtp']['speedup_vs_mlx_lm']:.2f} mtp_adaptive {row['specfleet_mtp_adaptive']['speedup_vs_mlx_lm']:.2f} (BG {row['mlx_lm_batch_generator']['tokens_per_s']:.0f} tok/s)"
            )
        print(t, f[-6:-5], "; ".join(cells))
print("gpu.py --presets tiny (CPU, bf16 random 2-layer qwen3)")
for t in ("before", "after"):
    for f in sorted(glob.glob(f"bench/results/s58/before_after/gpu_{t}_*.json")):
        d = json.load(open(f))["models"]["tiny"]["rows"]
        print(
            t,
            f[-6:-5],
            {
                B: {
                    k: round(v, 3)
                    for k, v in r.items()
                    if isinstance(v, (int, float))
                    and any(s in k for s in ("ratio", "efficiency", "over", "vs"))
                }
                for B, r in d.items()
            },
        )
print("demo")
for t in ("before", "after"):
    for f in sorted(glob.glob(f"bench/results/s58/before_after/demo_{t}_*.log")):
        s = open(f).read()
        a = re.search(r"speedup \(single stream\): (\S+)", s)
        b = re.search(r"speedup \(batch job\): (\S+ \([^)]*)", s)
        print(t, f[-5:-4], a and a.group(1), b and b.group(1))
