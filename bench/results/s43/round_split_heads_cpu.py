"""Stop 43: where a B = 1 round's host time goes, plain against MTP rounds with the head's steps
in MLX and on the host, and a zero-cost always-right drafter (no head at all).

    PYTHONPATH=. python bench/results/s43/round_split_heads_cpu.py [parts]

Each engine decodes 8 held-out prompts (48 tokens, ignore_eos) one at a time at depth 3 after a
warm-up, with bench.round_split's timers over its phases (`parts`: each part of a round
dispatched as soon as it is built, so its MLX time shows apart). Prints milliseconds a round
(prefill steps included in the totals, as phases of their own).
"""

from __future__ import annotations

import sys
import time

from bench.forced_drafter import DeviceForcedDrafter
from bench.round_split import instrument
from workers.drafters.mtp import MTPDrafter
from workers.drafters.mtp_host import HostMTPDrafter
from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams


def main() -> None:
    parts = len(sys.argv) > 1 and sys.argv[1] == "parts"
    base = Engine.load(None, drafter="mtp", max_batch_size=1)
    model, head, tok = base.drafter.target, base.drafter.head, base.tokenizer  # type: ignore[union-attr]
    prompts = [tok.encode(p) for p in heldout_prompts(8)]  # type: ignore[union-attr]
    sp = SamplingParams(max_tokens=48, ignore_eos=True)
    plain = Engine(model, tok, max_batch_size=1)
    refs = {tuple(p): o.tokens for p, o in zip(prompts, plain.generate(prompts, sp))}
    engines = {
        "plain": plain,
        "forced3": Engine(model, tok, drafter=DeviceForcedDrafter(refs, vocab=2048),
                          max_batch_size=1, draft_depth=3),
        "mlx3": Engine(model, tok, drafter=MTPDrafter(model, head), max_batch_size=1,
                       draft_depth=3),
        "host3": Engine(model, tok, drafter=HostMTPDrafter(model, head), max_batch_size=1,
                        draft_depth=3),
    }  # fmt: skip
    for name, e in engines.items():
        e.generate(prompts[:3], sp)
        e.take_round_stats()
        split = instrument(e, parts)
        if name == "host3":
            split.wrap(e.drafter.host, "step", "host: HostHead.step")  # type: ignore[union-attr]
            split.wrap(e.drafter.host, "logits", "host: logits")  # type: ignore[union-attr]
        t0 = time.perf_counter()
        outs = [e.generate([p], sp)[0] for p in prompts]
        dt = time.perf_counter() - t0
        rounds = len([s for s in e.take_round_stats() if s.batch_size])
        split.restore()
        tokens = sum(len(o.tokens) for o in outs)
        print(f"{name}: {1e3 * dt / rounds:.2f} ms a round, {tokens / rounds:.2f} tokens a round")
        for k, v in sorted(split.seconds.items(), key=lambda kv: -kv[1])[:14]:
            print(f"   {k:<55} {1e3 * v / rounds:.3f}")


if __name__ == "__main__":
    main()
