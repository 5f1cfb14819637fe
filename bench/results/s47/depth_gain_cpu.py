"""Stop 47: what drafting can gain at each batch size on the CPU, by the engine's own rounds.

    PYTHONPATH=. python bench/results/s47/depth_gain_cpu.py [SIZES] [BLOCKS] [ROUNDS]

An MTP engine (default model, the host head, `Engine.load` with warm-up) prefills B held-out
prompts (each block its own; ignore_eos, so no row leaves) and runs ROUNDS steps with the depth policy held
at one depth, then aborts them; each depth 0..5 in turn (in order, then in reverse order,
BLOCKS times), so every depth decodes the same prompts over the same contexts (up to
ROUNDS x 6 tokens past the prompt, as the demo's 64). A step's wall time is charged to the
depth it launched (MLX's CPU backend computes a round while launching it); the first two steps
of a block are dropped (the switch from the prefill). Tokens a
row emits per round come from the rounds' own stats (accepted drafts + 1). Prints, per B and
depth, the median step, tokens per row-round, and the decode rate ÷ depth 0's.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from workers.engine import Engine
from workers.stream_speed import heldout_prompts
from workers.types import SamplingParams

DEPTHS = range(6)


def measure(engine: Engine, size: int, blocks: int, rounds: int) -> dict:
    policy = engine.depth_policy
    assert policy is not None
    sp = SamplingParams(max_tokens=rounds * (max(DEPTHS) + 1) + 8, ignore_eos=True)
    texts = heldout_prompts(size * blocks)  # each block its own B prompts, every depth alike
    steps: dict[int, list[float]] = {k: [] for k in DEPTHS}
    emitted: dict[int, list[float]] = {k: [] for k in DEPTHS}
    for b in range(blocks):
        prompts = [engine.tokenizer.encode(t) for t in texts[b * size : (b + 1) * size]]
        for k in DEPTHS if b % 2 == 0 else reversed(DEPTHS):
            ids = [f"b{b}-k{k}-{i}" for i in range(size)]
            policy.forced = 0  # the prefill joins a plain batch alike for every depth
            for rid, prompt in zip(ids, prompts):
                engine.add_request(rid, prompt, sp)
            while engine.has_work() and len(engine.rows) < size:
                engine.step()
            engine.take_round_stats()
            policy.forced = k
            for i in range(rounds):
                t0 = time.perf_counter()
                engine.step()
                if i >= 2:
                    steps[k].append(time.perf_counter() - t0)
            for s in engine.take_round_stats():
                if s.accepted_per_row and s.draft_depth == k:
                    emitted[k].append(statistics.fmean(s.accepted_per_row) + 1)
            for rid in ids:
                engine.abort(rid)
            while engine.has_work():
                engine.step()
            engine.take_round_stats()
    policy.forced = None
    base = statistics.median(steps[0])
    out = {}
    for k in DEPTHS:
        step, tokens = statistics.median(steps[k]), statistics.fmean(emitted[k])
        out[k] = {"step_ms": round(step * 1e3, 2), "tokens_per_row_round": round(tokens, 3),
                  "cost_over_plain": round(step / base, 3),
                  "rate_over_plain": round(tokens * base / step, 3)}  # fmt: skip
    return out


def main() -> None:
    sizes = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,4,8,16").split(",")]
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    engine = Engine.load(None, drafter="mtp", max_batch_size=max(sizes), draft_depth=max(DEPTHS),
                         adaptive_depth=True, warm_up=True)  # fmt: skip
    result = {str(b): measure(engine, b, blocks, rounds) for b in sizes}
    print(json.dumps({"blocks": blocks, "rounds": rounds, "by_batch_size": result}))


if __name__ == "__main__":
    main()
