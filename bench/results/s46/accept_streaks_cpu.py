"""Stop 46, CPU: how a round's accepted drafts depend on the round before (B = 1, greedy).

    PYTHONPATH=. python bench/results/s46/accept_streaks_cpu.py 8 64

MTP at fixed depth K over PROMPTS held-out prompts (64 tokens) alone; each request's accepted
counts per drafting round go to accept_streaks_K.json (streak_sim.py reads it); prints the
marginal distribution and, for each previous count, P(next count >= j).
"""

import json
import pathlib
import sys

import numpy as np

from bench.turns import host_mtp_engine
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

K = int(sys.argv[1])
n = int(sys.argv[2])
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
e = host_mtp_engine(plain, K, adaptive=False, warm_up=False)
seqs = []
for p in heldout_prompts(n):
    e.take_round_stats()
    e.generate([p], SamplingParams(max_tokens=64, temperature=0.0))
    st = [int(s.num_accepted_tokens) for s in e.take_round_stats() if s.draft_depth == K]
    seqs.append(st)
out = pathlib.Path(__file__).with_name(f"accept_streaks_{K}.json")
out.write_text(json.dumps(seqs))
pairs = [(a, b) for s in seqs for a, b in zip(s, s[1:])]
M = np.zeros((K + 1, K + 1))
for a, b in pairs:
    M[a, b] += 1
print("marginal", np.round(np.bincount([b for _, b in pairs], minlength=K + 1) / len(pairs), 3))
for a in range(K + 1):
    row = M[a] / max(1, M[a].sum())
    surv = [round(float(row[j:].sum()), 2) for j in range(1, K + 1)]
    print(a, int(M[a].sum()), "P(next a>=j) j=1..K:", surv)
