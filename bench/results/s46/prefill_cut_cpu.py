"""Stop 46, CPU: the MTP prefill cut at the head's window (two forwards) against one forward.

    PYTHONPATH=. python bench/results/s46/prefill_cut_cpu.py B PROMPTS REPS

bench/turns.py: plain, MTP as is (`cut`) and MTP with `Prefill.cut_at_window` off (`nocut`),
adaptive depth up to 5, in turns.
"""

import contextlib
import json
import sys
from unittest import mock

import workers.prefill_job as pj
from bench.turns import host_mtp_engines, in_turns
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

B = int(sys.argv[1])
n = int(sys.argv[2])
reps = int(sys.argv[3])


@contextlib.contextmanager
def nocut():
    orig = pj.Prefill.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.cut_at_window = False

    with mock.patch.object(pj.Prefill, "__init__", init):
        yield


engines = host_mtp_engines(B, 5, True, {"cut": contextlib.nullcontext, "nocut": nocut})
prompts = heldout_prompts(n)
groups = [prompts[i : i + B] for i in range(0, n, B)]
p = SamplingParams(max_tokens=64, temperature=0.0)
print(json.dumps(in_turns(engines, groups, p, reps, contexts={"nocut": nocut})))
