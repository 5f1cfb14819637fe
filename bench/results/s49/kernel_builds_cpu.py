"""Stop 49: kernels MLX builds in a plain engine's warm-up and in a 32-prompt job after it, with
the job's time (run twice with TMPDIR set to one empty directory: cold, then warm).

    TMPDIR=EMPTY LD_PRELOAD=... PYTHONPATH=. python bench/results/s49/kernel_builds_cpu.py
"""

import glob
import os
import time

from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def kernels():
    return set(os.path.basename(p) for p in glob.glob(os.environ["TMPDIR"] + "/mlx/*/cpu/*.so"))


t0 = time.perf_counter()
e = Engine.load(None, drafter=None, max_batch_size=16, warm_up=True)
t1 = time.perf_counter()
k0 = kernels()
print("load+warm s", round(t1 - t0, 2), "kernels after warm-up", len(k0))
texts = heldout_prompts(32)
prompts = [e.tokenizer.encode(t) for t in texts]
sp = SamplingParams(max_tokens=64)
for i, p in enumerate(prompts):
    e.add_request(f"r{i}", p, sp)
t2 = time.perf_counter()
while e.has_work():
    e.step()
t3 = time.perf_counter()
k1 = kernels()
print("job s", round(t3 - t2, 2), "new kernels in job", len(k1 - k0), sorted(k1 - k0)[:10])
