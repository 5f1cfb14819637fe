"""Joiners in finished rows' slots on and off, in turns in one process (2-core CPU).

    PYTHONPATH=. python bench/results/s40/slots_ab_cpu.py plain,mtp_fixed,mtp 5

Runs on 30fd259's tree (`Membership._change_rows`, reverted in 96478e6): per engine
(`bench.join_split.make_engine`, B = 16, 32 held-out prompts x 64 tokens, greedy, all equal),
passes with the old join (finished rows leave by a gather of the rest, joiners are appended)
and the new (joiners written into the finished rows' slots) in turns; prints each engine's
on ÷ off tokens/s per pair and their median. BLIS preloaded, one BLAS thread.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from bench.join_split import make_engine
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from workers.membership import Membership

MODEL = Path("workers/default_model/target")


def main() -> None:
    prompts = heldout_prompts(MODEL, 32)
    sp = spread_params(32, 64, 0.0)
    real = Membership._change_rows  # type: ignore[attr-defined]

    def old_way(self, joining=(), cache=None, hidden=None):  # type: ignore[no-untyped-def]
        if joining and any(r.is_finished for r in self.rows):
            real(self)  # finished rows leave first (a gather of the rest), then joiners append
        return real(self, joining, cache, hidden)

    for name in sys.argv[1].split(","):
        engine = make_engine(name, MODEL, 16)
        engine.generate(prompts, sp)
        runs: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(int(sys.argv[2])):
            for mode in ("off", "on"):
                Membership._change_rows = old_way if mode == "off" else real  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                outs = engine.generate(prompts, sp)
                runs[mode].append(sum(len(o.tokens) for o in outs) / (time.perf_counter() - t0))
        Membership._change_rows = real  # type: ignore[attr-defined]
        ratios = [a / b for a, b in zip(runs["on"], runs["off"])]
        print(name, "on/off median", round(statistics.median(ratios), 3),
              [round(r, 3) for r in ratios], "tok/s on", [round(x) for x in runs["on"]],
              "off", [round(x) for x in runs["off"]], flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
