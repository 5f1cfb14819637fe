"""The adaptive MTP engine as served, round by round: the depth it took and what each round cost.

    python -m bench.adaptive_trace --model-dir DIR --batch-sizes 8,16 [--prompts 16]
        [--reps 4] [--depth 3] --out F.json

Per batch size, fresh engines as a serving worker builds them (warm-up; the MTP engine with the
depth policy up to `--depth`, 3 by default), then `--reps` passes of each over the held-out
prompts (greedy, 96 tokens or `--spread` around 96, `ignore_eos`), plain first. For the MTP
passes it records every round the policy observed (rows, depth, seconds, drafts accepted) and
prints the depth sequence run-length encoded (`3x127`: 127 rounds at depth 3) and each (rows,
depth) cell's rounds, median and total milliseconds. The first pass of fresh engines includes
their cold builds (on MLX CUDA).

Each round also records why the policy took its depth (`trace_choices`): `probe` (a bucket's
warm-up), `explore`, `held` (a choice reused within `refresh_every`), `rates` (tokens per second:
each depth's predicted rate and the margin drafting had to clear) or `drain` (the job's end in
sight: each depth's predicted seconds to finish the running and waiting rows, and the margin).
The summary counts rounds by (reason, depth) and, for plain rounds of 8 rows or more, by reason.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import workers.depth_policy as depth_policy_module
from bench.p5_pairs import spread_params
from bench.peers import heldout_prompts
from bench.step_log import Step, log_steps
from workers import Engine
from workers.depth_policy import DepthPolicy
from workers.drain import job_seconds_by_depth, row_scales, rows_expected_tokens

JOB_DEPTH = depth_policy_module.job_depth


def trace_choices(policy: DepthPolicy, choices: list[dict]) -> None:
    """Wrap `policy.choose` (and what it consults) to append, once per round, the depth chosen
    and why (see the module docstring) to `choices`."""
    why: dict = {}
    choose, probe, may_explore, rates = (
        policy.choose, policy._probe, policy._may_explore, policy._rates)  # fmt: skip
    job_depth = JOB_DEPTH  # the module's own, however many policies are traced

    def traced_probe(batch_size):  # type: ignore[no-untyped-def]
        k = probe(batch_size)
        if k is not None:
            why.update(why="probe")
        return k

    def traced_may_explore(batch_size, k, run=1):  # type: ignore[no-untyped-def]
        ok = may_explore(batch_size, k, run)
        why.update(why="explore" if ok else "explore refused")
        return ok

    def traced_rates(batch_size, switching_from=None, costs=None):  # type: ignore[no-untyped-def]
        r = rates(batch_size, switching_from, costs)
        if switching_from is not None:
            top = policy.depths()[-1]
            costs = policy.round_costs(batch_size) if costs is None else costs
            why.update(why="rates", gain=round(float(r[top] / r[0]), 3),
                       margin=round(policy._margin(batch_size, top, costs=costs), 3),
                       cost_ms=[round(float(costs[k]) * 1e3, 2) for k in (0, top)])  # fmt: skip
        return r

    def traced_job_depth(drain, job):  # type: ignore[no-untyped-def]
        s = job_seconds_by_depth(drain, job)
        top = job.depths[-1]
        scale, _ = row_scales(drain, job)
        why.update(why="drain", W=len(drain.waiting), free=drain.free_slots,
                   gain=round(s[0] / s[top], 3), margin=round(float(job.margin[top]), 3),
                   once_ms=[round(float(job.once[k]) * 1e3, 1) for k in (0, top)],
                   cost_ms={k: (job.costs[1:, k] * 1e3).round(2).tolist() for k in (0, top)},
                   # the running rows: tokens left, drafts proposed and accepted, the acceptance
                   # scale the rule read them at, and their expected tokens a round at `top`
                   remaining=drain.remaining.tolist(), drafted=drain.drafted.tolist(),
                   accepted=drain.accepted.tolist(), scale=scale.round(3).tolist(),
                   tokens_at_top=rows_expected_tokens(job.acceptance, scale, top).round(2).tolist(),
                   reference=round(job.reference, 3),
                   acceptance=np.round(job.acceptance, 3).tolist())  # fmt: skip
        return job_depth(drain, job)

    def traced_choose(batch_size):  # type: ignore[no-untyped-def]
        why.clear()
        k = choose(batch_size)
        if not choices or choices[-1]["round"] != policy._rounds:
            choices.append({"round": policy._rounds, "B": batch_size, "k": k,
                            **(why or {"why": "held"})})  # fmt: skip
        return k

    policy._probe, policy._may_explore, policy._rates = (  # type: ignore[method-assign]
        traced_probe, traced_may_explore, traced_rates)  # fmt: skip
    policy.choose = traced_choose  # type: ignore[method-assign]
    depth_policy_module.job_depth = traced_job_depth  # type: ignore[assignment]


def step_split(wall: float, steps: list[Step], stats: list, log: list) -> dict:
    """Where a pass's seconds went: engine steps with and without a prefill, the prefills
    themselves (RoundStats.time_prefill_s), the rounds the depth policy timed, and the rest
    (generate's own loop)."""
    with_prefill = [s.seconds for s in steps if s.prefill_tokens]  # as stops 35-37 counted
    return {
        "wall_s": round(wall, 3),
        "steps": len(steps),
        "steps_s": round(sum(s.seconds for s in steps), 3),
        "prefill_steps": len(with_prefill),
        "prefill_steps_s": round(sum(with_prefill), 3),
        "prefill_s": round(sum(s.time_prefill_s for s in stats), 3),
        "prefill_tokens": sum(s.num_prefill_tokens for s in stats),
        "policy_timed_s": round(sum(ms for _, _, ms, _ in log) / 1e3, 3),
    }


def reasons(choices: list[dict]) -> dict[str, dict[str, int]]:
    """Rounds by reason and depth, and plain rounds of 8 rows or more by reason."""
    by_depth: dict[str, int] = {}
    plain_big: dict[str, int] = {}
    for c in choices:
        key = f"{c['why']} k={c['k']}"
        by_depth[key] = by_depth.get(key, 0) + 1
        if c["k"] == 0 and c["B"] >= 8:
            plain_big[c["why"]] = plain_big.get(c["why"], 0) + 1
    return {"by_reason_depth": by_depth, "plain_rounds_8plus": plain_big}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batch-sizes", default="8,16")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--depth", type=int, default=3, help="the depth policy's cap (P5: 4)")
    ap.add_argument("--spread", type=float, default=0.0, help="as bench/p5_pairs.py's")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = spread_params(len(prompts), 96, args.spread)  # spread 0: 96 tokens each
    res: dict = {}
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        plain = Engine.load(args.model_dir, max_batch_size=B, warm_up=True)
        mtp = Engine.load(args.model_dir, drafter="mtp", max_batch_size=B, draft_depth=args.depth,
                          adaptive_depth=True, warm_up=True)  # fmt: skip
        policy = mtp.depth_policy
        assert policy is not None
        log: list[tuple[int, int, float, int]] = []  # (rows, depth, ms, accepted)
        observe = policy.observe

        def logged(counts, accepted, seconds, _observe=observe, _log=log):  # type: ignore[no-untyped-def]
            _log.append((len(counts), int(np.max(counts, initial=0)), round(seconds * 1e3, 2),
                         int(np.sum(accepted))))  # fmt: skip
            return _observe(counts, accepted, seconds)

        policy.observe = logged  # type: ignore[method-assign]
        choices: list[dict] = []
        trace_choices(policy, choices)
        for rep in range(args.reps):
            r: dict = {}
            for name, engine in (("plain", plain), ("mtp", mtp)):
                log.clear()
                choices.clear()
                engine.take_round_stats()
                steps = log_steps(engine)
                t0 = time.perf_counter()
                outs = engine.generate(prompts, sp)
                wall = time.perf_counter() - t0
                r[name] = round(sum(len(o.tokens) for o in outs) / wall, 1)
                r[f"{name}_split"] = step_split(wall, steps, engine.take_round_stats(), log)
                del engine.step  # the class's again
            cells: dict[str, list[float]] = {}
            runs: list[list[int]] = []  # [depth, rounds] in order
            for b, k, ms, _ in log:
                cells.setdefault(f"{b},{k}", []).append(ms)
                if runs and runs[-1][0] == k:
                    runs[-1][1] += 1
                else:
                    runs.append([k, 1])
            r["cells"] = {key: [len(v), round(float(np.median(v)), 2), round(float(np.sum(v)), 1)]
                          for key, v in sorted(cells.items())}  # fmt: skip
            r["runs"] = runs
            r["reasons"] = reasons(choices)
            r["choices"] = list(choices)
            r["policy_cells_ms"] = {f"{b},{k}": round(t * 1e3, 2)
                                    for (b, k), t in sorted(policy._cells().items())}  # fmt: skip
            r["policy_first_ms"] = {f"{b},{k}": round(t * 1e3, 2)
                                    for (b, k), t in sorted(policy._first.items())}  # fmt: skip
            # The MTP pass round by round (rows, depth, ms, drafts accepted) and step by step
            # (ms, prefill tokens): where a one-off cost (a build, a compile) lands, and how
            # acceptance moves through the job.
            r["mtp_rounds"] = [list(x) for x in log]
            r["mtp_steps"] = [[round(x.seconds * 1e3, 2), x.prefill_tokens] for x in steps]
            r["acceptance"] = policy.acceptance().round(3).tolist()
            r["ratio"] = round(r["mtp"] / r["plain"], 3)
            res[f"B={B} rep{rep}"] = r
            print(f"B={B} rep{rep}: depths {' '.join(f'{k}x{n}' for k, n in runs)[:1500]}")
            print(f"B={B} rep{rep}: plain {r['plain']} mtp {r['mtp']} ratio {r['ratio']} "
                  f"cells (rounds, median ms, total ms) {r['cells']}", flush=True)  # fmt: skip
            print(f"B={B} rep{rep}: reasons {r['reasons']}", flush=True)
            slowest = sorted(enumerate(log), key=lambda x: -x[1][2])[:5]
            print(f"B={B} rep{rep}: slowest MTP rounds (index, rows, depth, ms, accepted) "
                  f"{[(i, *x) for i, x in slowest]}", flush=True)  # fmt: skip
            print(
                f"B={B} rep{rep}: split plain {r['plain_split']} mtp {r['mtp_split']}", flush=True
            )
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
