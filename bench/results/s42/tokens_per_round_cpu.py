"""Stop 42: the engine's tokens per decode round with each MTP head, fixed depth, B = 1, greedy.

    PYTHONPATH=. python bench/results/s42/tokens_per_round_cpu.py DEPTHS [HEAD_DIR ...]

The shipped head (workers/default_model/target) and each HEAD_DIR's head draft for the same
target on the 64 held-out prompts (64 new tokens each), one request at a time. A round's tokens
are its accepted drafts plus the bonus token; rounds without drafts (prefill) are left out. The
count is deterministic (greedy; outputs are the target's whatever the head), so one pass is the
figure: no timing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workers.config import DEFAULT_MODEL_DIR
from workers.engine import Engine
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    depths = [int(x) for x in sys.argv[1].split(",")]
    heads = {"shipped": DEFAULT_MODEL_DIR / "target"}
    heads.update({Path(p).parent.name or p: Path(p) for p in sys.argv[2:]})
    plain = Engine.load(None, drafter=None, max_batch_size=1)
    prompts, sp = heldout_prompts(64), SamplingParams(max_tokens=64)
    out = {}
    for name, head in heads.items():
        for k in depths:
            drafter = make_drafter("mtp", head, plain.model)
            engine = Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=1,
                            draft_depth=k)  # fmt: skip
            tokens = rounds = 0
            for p in prompts:
                engine.generate([p], sp)
                drafted = [s for s in engine.take_round_stats() if s.draft_depth > 0]
                rounds += len(drafted)
                tokens += sum(s.num_accepted_tokens + s.batch_size for s in drafted)
            out[f"{name} depth {k}"] = round(tokens / rounds, 4)
            print(f"{name} depth {k}: {out[f'{name} depth {k}']}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
