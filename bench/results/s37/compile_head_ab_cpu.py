"""s37: plain, MTP with the head's steps as ops, MTP with them compiled (spans rounded), taking
turns in one process on the default model (greedy, 64 tokens +-50% per prompt).

    python bench/results/s37/compile_head_ab_cpu.py B PROMPTS REPS ADAPTIVE(0|1)

Prints tokens/s per pass and each engine's median ÷ plain's; every MTP pass is checked
token for token against the plain pass.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers import Engine, compiled_step


def main() -> None:
    B, n, reps, adaptive = (int(a) for a in sys.argv[1:5])
    model_dir = Path("workers/default_model/target")
    prompts, params = heldout_prompts(model_dir, n), spread_params(n, 64, 0.5)
    engines = {"plain": Engine.load(str(model_dir), max_batch_size=B)}
    for name in ("ops", "compiled"):
        engines[name] = Engine.load(str(model_dir), drafter="mtp", max_batch_size=B,
                                    draft_depth=3, adaptive_depth=bool(adaptive))  # fmt: skip
    engines["compiled"].drafter.compile_steps()  # the opt-in route: spans rounded to SPAN

    def run(engine: Engine) -> tuple[float, list[list[int]]]:
        t0 = time.perf_counter()
        outs = engine.generate(prompts, params)
        seconds = time.perf_counter() - t0
        return sum(len(o.tokens) for o in outs) / seconds, [list(o.tokens) for o in outs]

    for engine in engines.values():
        run(engine)  # warm: traces, kernels
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for rep in range(reps):
        reference = None
        for name, engine in engines.items():
            tokens_per_s, outs = run(engine)
            rates[name].append(tokens_per_s)
            reference = reference or outs
            assert outs == reference, name
        print(rep, {k: round(v[-1], 1) for k, v in rates.items()}, flush=True)
    medians = {k: statistics.median(v) for k, v in rates.items()}
    print(f"B={B} adaptive={bool(adaptive)} ÷ plain",
          {k: round(v / medians["plain"], 3) for k, v in medians.items()})  # fmt: skip
    print("traces", len(compiled_step._TRACES))


if __name__ == "__main__":
    main()
