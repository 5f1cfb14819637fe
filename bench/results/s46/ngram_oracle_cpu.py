"""Stop 46, CPU: would n-gram drafts beat the MTP head's where the history repeats itself?

    PYTHONPATH=. python bench/results/s46/ngram_oracle_cpu.py DEPTH PROMPTS

MTP at fixed DEPTH, B = 1, rounds not pipelined (each draft sees its exact history); for every
drafting round, the MTP drafts' accepted count and prompt-lookup's (NgramDrafter, n = 4..1)
against the greedy output, grouped by the longest n-gram match; the oracle (the better of the
two per round) and two rules (n-gram where a match of >= 3 or 4 tokens exists).
"""

import collections
import dataclasses
import sys

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from bench.turns import host_mtp_engine
from workers.drafters.mtp_host import HostMTPDrafter
from workers.drafters.ngram import NgramDrafter
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

K = int(sys.argv[1]) if len(sys.argv) > 1 else 5
plain = Engine.load(None, drafter=None, max_batch_size=1, warm_up=False)
e = host_mtp_engine(plain, K, adaptive=False, warm_up=False)
e.config = dataclasses.replace(e.config, pipeline=False)
rec = []
orig = HostMTPDrafter.propose


def prop(self, req):
    p = orig(self, req)
    if p.tokens.shape[1]:
        rec.append((list(req.histories[0]), np.array(p.tokens)[0][: int(p.counts[0])]))
    return p


HostMTPDrafter.propose = prop
prompts = heldout_prompts(int(sys.argv[2]) if len(sys.argv) > 2 else 32)
ng = NgramDrafter(max_ngram=4, min_ngram=1)
res = collections.defaultdict(list)
for p in prompts:
    rec.clear()
    out = e.generate([p], SamplingParams(max_tokens=64, temperature=0.0))[0]
    ptoks = plain.tokenizer.encode(p)
    full = list(ptoks) + list(out.tokens)
    for hist, drafts in rec:
        t = len(hist)

        def acc(ds, t=t, full=full):
            a = 0
            for j, x in enumerate(ds):
                if t + j < len(full) and full[t + j] == int(x):
                    a += 1
                else:
                    break
            return a

        h = np.array(hist, dtype=np.int64)
        n = 0
        for m in range(4, 0, -1):
            if (sliding_window_view(h[:-1], m) == h[-m:]).all(axis=1).any():
                n = m
                break
        nd = ng.lookup(h, K)
        res[n].append((acc(drafts), acc(nd), len(nd)))
allm = []
rule = {}
for n in sorted(res):
    v = np.array(res[n])
    allm.append(v)
    print(
        f"match {n}: rounds {len(v)} mtp acc {v[:, 0].mean():.2f} ngram acc {v[:, 1].mean():.2f} max {np.maximum(v[:, 0], v[:, 1]).mean():.2f}"
    )
v = np.concatenate(allm)
print("all: mtp", v[:, 0].mean(), "oracle max", np.maximum(v[:, 0], v[:, 1]).mean())
for thr in (3, 4):
    sel = np.concatenate(
        [np.where(n >= thr, np.array(res[n])[:, 1], np.array(res[n])[:, 0]) for n in sorted(res)]
    )
    print("rule ngram if match>=", thr, sel.mean())
