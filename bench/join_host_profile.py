"""Where the host's time goes in a job's joins and finishes: cProfile over an engine's pass.

    python -m bench.join_host_profile --model-dir DIR
        [--batch-size 16] [--prompts 64] [--spread 0] [--engines mtp_fixed,plain] --out F.txt

On a GPU a small model's steps are bound by the host (`bench.step_kernels`: the device runs
kernels for a fraction of each step). Each engine (`bench.join_split.make_engine`) runs the
job twice; the second pass runs under cProfile and this writes, per engine, the functions
taking the most time of their own, and the callees of the step's parts: `_admit` (the joins'
prefills, inserts, appends), `_drop_finished` (finished rows leaving), `_launch` (building a
round). The launcher thread is off (`SPECFLEET_LAUNCH_THREAD=0` unless the environment sets
it), so MLX's encoding runs on the profiled thread, under the Python call that evaluates.
"""

from __future__ import annotations

import argparse
import io
import os
import pstats

from bench.join_split import add_job_args, job, make_engine
from bench.profile_round import profile_pass
from workers import launch

# the step's parts and the join's own calls whose callees are printed
PARTS = ("_admit", "_drop_finished", "_launch", "_collect", "advance", "prefill_chunk",
         "add_rows", "keep_rows", "append", "insert", "prompt_hidden", "settle")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_args(ap, "mtp_fixed,plain", spread=0.0)
    ap.add_argument("--lines", type=int, default=30)
    args = ap.parse_args()
    # MLX's encoding under the Python call that evaluates: no launcher thread, unless the
    # environment says otherwise (workers/launch.py reads it as each engine is built)
    os.environ.setdefault(launch.ENV, "0")
    prompts, sp = job(args)
    B, report = args.batch_size, io.StringIO()
    for name in args.engines.split(","):
        engine = make_engine(name, args.model_dir, B)
        engine.generate(prompts, sp)  # kernels built, graphs cached
        prof, wall = profile_pass(engine, prompts, sp)
        report.write(f"\n==== {name}: B={B}, profiled pass {wall:.3f} s ====\n")
        stats = pstats.Stats(prof, stream=report)
        stats.sort_stats("tottime").print_stats(args.lines)
        stats.sort_stats("cumulative")
        for part in PARTS:
            stats.print_callees(rf"\({part}\)")  # a function's own name, not list.append
        stats.print_stats(args.lines)
        del engine
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report.getvalue())
    print(report.getvalue()[-6000:])


if __name__ == "__main__":
    main()
