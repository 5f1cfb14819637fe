"""Each warm-up round's (B, depth, ms) at batch size B for an adaptive MTP engine, and the cells
the policy keeps from them.

    python bench/results/s65/cpu/warm_cells_cpu.py B MAX_DEPTH
"""

import sys

from bench.turns import host_mtp_engine
from workers.depth_policy import DepthPolicy
from workers.engine import Engine

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
e = host_mtp_engine(plain, maxd, True)
print("warm", {c: round(t * 1e3, 1) for c, t in sorted(e.depth_policy._warm.items()) if c[0] == B})
