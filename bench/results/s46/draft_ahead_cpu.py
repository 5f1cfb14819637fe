"""Stop 46, CPU: after a round that accepts all K drafts, would the head's chain continued
K + 1 .. 2K + 1 deep have drafted the next round? (B = 1, rounds not pipelined.)

    PYTHONPATH=. python bench/results/s46/draft_ahead_cpu.py 32

The head chains K + 6 drafts a round (the verify sees K); for rounds that accept all K: how
often the target's bonus token equals draft K + 1, and, then, how many of drafts K + 2 ..
2K + 1 the next tokens accept.
"""

import collections
import dataclasses
import sys

import numpy as np

from bench.turns import host_mtp_engine
from workers.drafters.base import Proposal
from workers.drafters.mtp_host import HostMTPDrafter
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

K = 5
EXTRA = 6
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
e = host_mtp_engine(plain, K, adaptive=False, warm_up=False)
e.config = dataclasses.replace(e.config, pipeline=False)
rec = []


def propose(self, request):
    self.histories = list(request.histories)
    depths = np.asarray(request.depths, dtype=np.int64) * self.ready
    B, Kk = len(depths), int(depths.max(initial=0))
    if Kk == 0:
        return Proposal(tokens=np.zeros((B, 0), np.int32), counts=np.zeros(B, np.int64))
    first = self._absorb()
    chain, logits = first
    drafted = []
    for step in range(Kk + EXTRA):
        chosen = logits.argmax(axis=-1)
        drafted.append(chosen)
        if step + 1 < Kk + EXTRA:
            chain, logits = self._chain(chain, chosen)
    self._chained = np.full(B, Kk + EXTRA - 1, dtype=np.int64)
    allt = np.stack(drafted, axis=1)
    rec.append((list(request.histories[0]), allt[0]))
    return Proposal(tokens=self._stack(drafted[:Kk]), counts=depths)


HostMTPDrafter.propose = propose
res = []
for p in heldout_prompts(int(sys.argv[1])):
    rec.clear()
    out = e.generate([p], SamplingParams(max_tokens=64, temperature=0.0))[0]
    full = list(plain.tokenizer.encode(p)) + list(out.tokens)
    for hist, dr in rec:
        t = len(hist)
        acc = 0
        while acc < K and t + acc < len(full) and full[t + acc] == dr[acc]:
            acc += 1
        if acc == K and t + K < len(full):
            b = full[t + K]
            hit = b == dr[K]
            ahead_acc = 0
            if hit:
                while (
                    ahead_acc < K
                    and t + K + 1 + ahead_acc < len(full)
                    and full[t + K + 1 + ahead_acc] == dr[K + 1 + ahead_acc]
                ):
                    ahead_acc += 1
            res.append((hit, ahead_acc))
    # fresh next-round acceptance after a=K rounds for comparison
n_rounds = len(res)
hits = [r for r in res if r[0]]
print(
    "a=K rounds",
    n_rounds,
    "hit rate",
    len(hits) / max(1, n_rounds),
    "ahead accepted mean",
    np.mean([h[1] for h in hits]) if hits else None,
)
print("dist of ahead accepted", collections.Counter(h[1] for h in hits))
