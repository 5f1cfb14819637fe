"""Each warm-up round's (B, depth, ms) at batch size B for an adaptive MTP engine, and the cells
the policy keeps from them.

    python bench/results/s65/cpu/warm_cells_cpu.py B MAX_DEPTH
"""

import sys

from workers.config import DEFAULT_MODEL_DIR
from workers.depth_policy import DepthPolicy
from workers.engine import Engine
from workers.loading import make_drafter

B = int(sys.argv[1])
maxd = int(sys.argv[2])
real_end = DepthPolicy.end_warm_up


def end(self, sizes):
    for b, k, t in self._rows:
        if b == B:
            print(b, k, round(t * 1e3, 1))
    real_end(self, sizes)


DepthPolicy.end_warm_up = end
plain = Engine.load(None, drafter=None, max_batch_size=B, warm_up=False)
e = Engine(
    plain.model,
    plain.tokenizer,
    drafter=make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model),
    max_batch_size=B,
    draft_depth=maxd,
    adaptive_depth=True,
    warm_up=True,
)
print("warm", {c: round(t * 1e3, 1) for c, t in sorted(e.depth_policy._warm.items()) if c[0] == B})
