import time

from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts

e = Engine.load(drafter="mtp", draft_depth=4, max_batch_size=1)
tok = e.tokenizer
prompts = [tok.encode(p) for p in heldout_prompts(16)]
sp = SamplingParams(max_tokens=64)
e.generate(prompts[:4], sp)
t = time.perf_counter()
outs = e.generate(prompts, sp)
s = time.perf_counter() - t
print(round(sum(len(o.tokens) for o in outs) / s, 1))
