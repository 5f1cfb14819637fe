"""Stop 46, CPU: drafting deeper after a round that accepted every draft (B = 1), in turns.

    PYTHONPATH=. python bench/results/s46/streak_depth_cpu.py HI LO PROMPTS REPS

`StreakDrafter`: the host MTP drafter, each row drafting HI after a round that accepted all its
drafts and LO otherwise (the engine at fixed depth HI); against plain, fixed depth 5 and
adaptive up to 5 (the demo's stream), each prompt alone, every output checked equal.
"""

import json
import sys

import numpy as np

from bench.turns import default_head, host_mtp_engine, in_turns
from workers.drafters.base import Proposal, empty_proposal
from workers.drafters.mtp_host import HostMTPDrafter, _host_count
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


class StreakDrafter(HostMTPDrafter):
    """Rows whose last round accepted every draft draft `hi`; others `lo` (both <= asked)."""

    hi = 8
    lo = 4

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._last_depth = np.zeros(0, dtype=np.int64)
        self._full = np.zeros(0, dtype=bool)

    def _absorb(self):
        pairs = self._take_backlog()
        if pairs is None:
            return None
        import mlx.core as mx

        mx.eval(pairs.hidden, pairs.tokens, pairs.count)
        hidden = np.array(pairs.hidden, dtype=np.float32)
        tokens = np.array(pairs.tokens, dtype=np.int64)
        count = _host_count(pairs)
        if len(self._last_depth) == len(count):
            self._full = (count - 1 >= self._last_depth) & (self._last_depth > 0)
        else:
            self._full = np.zeros(len(count), dtype=bool)
        chain, normed = self.host.step(hidden, tokens, self.cache, np.maximum(count - 1, 0))
        self.cache.lengths += count
        return chain, self.host.logits(normed[:, 0])

    def propose(self, request):
        self.histories = list(request.histories)
        asked = np.asarray(request.depths, dtype=np.int64) * self.ready
        B = len(asked)
        if int(asked.max(initial=0)) == 0:
            self._last_depth = np.zeros(B, dtype=np.int64)
            return empty_proposal(B)
        first = self._absorb()
        if first is None:
            self._last_depth = np.zeros(B, dtype=np.int64)
            return empty_proposal(B)
        full = self._full if len(self._full) == B else np.zeros(B, dtype=bool)
        depths = np.minimum(asked, np.where(full, self.hi, self.lo))
        K = int(depths.max())
        chain, logits = first
        drafted = []
        for step in range(K):
            chosen = logits.argmax(axis=-1)
            drafted.append(chosen)
            if step + 1 < K:
                chain, logits = self._chain(chain, chosen)
        self._chained = np.full(B, K - 1, dtype=np.int64)
        self._last_depth = depths
        return Proposal(tokens=self._stack(drafted), counts=depths, probs=None)


hi, lo = int(sys.argv[1]), int(sys.argv[2])
n = int(sys.argv[3])
reps = int(sys.argv[4])
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=True)
sd = StreakDrafter(plain.model, default_head())
sd.hi, sd.lo = hi, lo
engines = {
    "plain": plain,
    "fixed5": host_mtp_engine(plain, 5, adaptive=False),
    "adaptive5": host_mtp_engine(plain, 5, adaptive=True),
    f"streak{hi}/{lo}": host_mtp_engine(plain, hi, adaptive=False, drafter=sd),
}
prompts = heldout_prompts(n)
p = SamplingParams(max_tokens=64, temperature=0.0)
print(json.dumps(in_turns(engines, [[x] for x in prompts], p, reps)))
