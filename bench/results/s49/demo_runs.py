"""Stop 49: `./run demo` on this tree N times in a row (kernel cache warm after the first),
its two speedup lines parsed (bench.demo_ab.run_demo); JSON to OUT.

    LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/demo_runs.py N OUT
"""

import json
import sys
import time
from pathlib import Path

from bench.demo_ab import run_demo

runs = []
for _i in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    r = run_demo(Path(".").resolve())
    r["wall_s"] = round(time.perf_counter() - t0, 1)
    runs.append(r)
    print(json.dumps(r), flush=True)
Path(sys.argv[2]).write_text(json.dumps({"tree": "after", "runs": runs}, indent=1))
