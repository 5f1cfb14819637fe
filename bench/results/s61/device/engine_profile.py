"""Stop 61: where the engine thread's Python goes in a served pass on MLX CUDA (cProfile of
the engine thread only; the launcher thread encodes unprofiled). join_threads.py found the
engine thread's own time about equal to the launcher's encode in steady steps (B = 8: plain
~1.9 ms, MTP ~3.5 ms a step), so both bound a round.

    python bench/results/s61/device/engine_profile.py MODEL_DIR B PROMPTS OUT_PREFIX

MLX's ops are nanobind functions, which cProfile does not list: their time is the tottime of
the Python function that calls them. Prints and writes, per engine (plain, MTP with the depth
policy up to 4), the top functions by tottime and by cumtime.
"""

import cProfile
import io
import pstats
import sys
from pathlib import Path

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine

model_dir, B, n, prefix = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
prompts = heldout_prompts(model_dir, n)
sp = spread_params(len(prompts), 96, 0.5)
for name, kw in (
    ("plain", {}),
    ("mtp", {"drafter": "mtp", "draft_depth": 4, "adaptive_depth": True}),
):
    engine = Engine.load(model_dir, max_batch_size=B, warm_up=True, **kw)
    for _ in range(2):
        engine.generate(prompts, sp)
    profile = cProfile.Profile()
    profile.enable()
    engine.generate(prompts, sp)
    profile.disable()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumtime").print_stats(60)
    Path(f"{prefix}_{name}.txt").write_text(text.getvalue())
    print(name, text.getvalue()[:6000], flush=True)
