"""Stop 51: plain decoding of one row at a time (B = 1), pipelined and synced, in the tree on
PYTHONPATH: the default model, 8 held-out prompts x 48 tokens (EOS ignored), after one untimed
pass. Prints one JSON line of tokens/s. Run by plain_b1_ab.sh, trees in turns.

    LD_PRELOAD=... PYTHONPATH=TREE python bench/results/s51/plain_b1.py LABEL
"""

import json
import sys
import time

from mlx_lm import load

from workers import Engine, SamplingParams
from workers.config import DEFAULT_MODEL_DIR
from workers.loading import upcast_on_cpu
from workers.stream_speed import heldout_prompts

label = sys.argv[1]
model, tok = load(str(DEFAULT_MODEL_DIR / "target"))[:2]
upcast_on_cpu(model)
prompts = heldout_prompts(8)
sp = SamplingParams(max_tokens=48, ignore_eos=True)
row = {"label": label}
for name, pipeline in (("plain", True), ("sync", False), ("plain2", True)):
    engine = Engine(model, tok, max_batch_size=1, pipeline=pipeline)
    engine.generate(prompts[:2], sp)  # untimed
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    row[name] = round(sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0), 1)
print(json.dumps(row), flush=True)
