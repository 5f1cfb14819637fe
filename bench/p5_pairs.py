"""P5 in pairs: specfleet MTP over specfleet plain decoding, each MTP pass right after its plain
pass, in one process.

    python -m bench.p5_pairs --model-dir DIR [--batch-sizes 1,4,8,16] [--pairs 4] [--out FILE]

bench/peers.py runs every system, and mlx-lm's reference decode, at every B: minutes per run.
On the lent GPU single passes move by 30-50% between minutes, so a change to the MTP round is
judged by many short pairs instead: a pair's two passes share the card's state, and the median
of the pairs' ratios is the figure. Both passes decode the same held-out prompts greedily; the
MTP pass's rows are compared with the plain pass's (on the CPU in fp32 they are identical; in
bf16 batched rounding may flip near-ties, which the count shows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.peers import add_workload_args, heldout_prompts
from workers import Engine, SamplingParams
from workers.depth_policy import DepthPolicy
from workers.drain import DrainingRows


def spread_params(n: int, max_tokens: int, spread: float) -> list[SamplingParams]:
    """Greedy params, each prompt its own max_tokens drawn uniformly (seeded) within +- `spread`
    of `max_tokens`: rows end apart, as served requests do."""
    u = np.random.default_rng(0).random(n)
    return [SamplingParams(max_tokens=max(1, round(max_tokens * (1 + spread * (2 * x - 1)))),
                           ignore_eos=True, temperature=0.0) for x in u]  # fmt: skip


def timed_pass(engine: Engine, prompts: list[list[int]], sp: list[SamplingParams]) -> dict:
    engine.take_round_stats()
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    seconds = time.perf_counter() - t0
    stats = engine.take_round_stats()
    drafting = sum(s.num_drafts for s in stats)
    return {
        "tokens_per_s": sum(len(o.tokens) for o in outs) / seconds,
        "accepted_per_row_round": sum(s.num_accepted_tokens for s in stats) / max(1, drafting),
        "outputs": [list(o.tokens) for o in outs],
    }


RowLimits = tuple[int, float]  # (row_linear.ROWS_MAX, ROW_BYTES_MAX)


def parse_row_limits(text: str) -> tuple[RowLimits, RowLimits]:
    """'ROWS:MIB,ROWS:MIB' (MIB may be 'inf') -> the off and on limits of the per-row route."""
    try:
        off, on = (
            (int(rows), float(mib) * (1 << 20))
            for rows, mib in (part.split(":") for part in text.split(","))
        )
    except ValueError:
        raise SystemExit(
            f"--ab-row-limits={text!r}: give two ROWS:MIB pairs, off then on, e.g. 32:inf,64:48"
        ) from None
    return off, on


def rotated(items: list, rep: int) -> list:
    """`items` rotated by `rep` places: over any run of len(items) repeats each item takes each
    place in the repeat once, so whatever favours a place (the first pass after the last, the
    engine that runs second) falls on every item alike; with an odd count of repeats and two
    items, one order runs once more. Stop 60 met a setting that read +0.00-0.14 over the policy
    when it ran after it in each repeat, and +0.01-0.03 when it ran first; a place effect was
    not measured."""
    k = rep % len(items) if items else 0
    return list(items[k:]) + list(items[:k])


def ab_row_linear(
    plain: Engine, mtp: Engine, prompts, sp, pairs: int,
    limits: tuple[RowLimits, RowLimits] | None = None,
) -> dict:  # fmt: skip
    """Per repeat: plain and MTP passes with the per-row gemv route off, then on (on, then off
    every other repeat: `rotated`), in place; with `limits` (off, on), the route stays
    installed and "off" / "on" are its (ROWS_MAX, ROW_BYTES_MAX) limits."""
    from workers import row_linear
    from workers.compiled_step import CompiledStep

    models = [plain.model, mtp.model, getattr(mtp.drafter, "head", None)]
    # Compiled head steps keep the route they were traced with: one CompiledStep per state,
    # made once the state's classes are in place (its key names them: each state's own traces).
    compiled = getattr(mtp.drafter, "compiled", None)
    traces = {"on": compiled}

    default = (row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX)

    def set_limits(rows_max: int, bytes_max: float) -> None:
        row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX = rows_max, bytes_max

    def route(state: str) -> None:
        if limits is not None:
            set_limits(*limits[state == "on"])
        for m in models:
            if m is not None:
                on = state == "on" or limits is not None
                (row_linear.install if on else row_linear.remove)(m)
        if compiled is not None:
            if state not in traces:
                traces[state] = CompiledStep(compiled.step, compiled.modules)
            mtp.drafter.compiled = traces[state]  # type: ignore[union-attr]

    runs: dict[str, list[float]] = {k: [] for k in ("plain_off", "mtp_off", "plain_on", "mtp_on")}
    for state in ("off", "on"):  # warm: each state's kernels, graphs and traces built
        route(state)
        timed_pass(plain, prompts, sp), timed_pass(mtp, prompts, sp)
    for rep in range(pairs):
        for state in rotated(["off", "on"], rep):
            route(state)
            runs[f"plain_{state}"].append(timed_pass(plain, prompts, sp)["tokens_per_s"])
            runs[f"mtp_{state}"].append(timed_pass(mtp, prompts, sp)["tokens_per_s"])
    route("on" if limits is None else "off")  # the engine's own classes for what follows
    set_limits(*default)
    return on_off_summary(runs)


def on_off_summary(runs: dict[str, list[float]]) -> dict:
    """tokens/s of plain and MTP passes with a setting off and on -> each pair's ratios (the
    setting on ÷ off, MTP ÷ plain either way), their medians, and the passes."""
    ratio = {k: [a / b for a, b in zip(runs[n], runs[d])] for k, n, d in (
        ("plain_on_over_off", "plain_on", "plain_off"), ("mtp_on_over_off", "mtp_on", "mtp_off"),
        ("mtp_over_plain_off", "mtp_off", "plain_off"), ("mtp_over_plain_on", "mtp_on", "plain_on"),
    )}  # fmt: skip
    return {
        "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in runs.items()},
        "summary": {k: round(statistics.median(v), 3) for k, v in ratio.items()},
        "pairs": {k: [round(x, 3) for x in v] for k, v in ratio.items()},
    }


def ab_setting(plain: Engine, mtp: Engine, prompts, sp, pairs: int, apply) -> dict:
    """Per repeat: plain and MTP passes with a setting off, then on (in turns: `rotated`), set
    in place on both engines by `apply(engine, on)` (left as the last pass set it)."""
    runs: dict[str, list[float]] = {k: [] for k in ("plain_off", "mtp_off", "plain_on", "mtp_on")}
    for rep in range(pairs):
        for state in rotated(["off", "on"], rep):
            for name, engine in (("plain", plain), ("mtp", mtp)):
                apply(engine, state == "on")
                runs[f"{name}_{state}"].append(timed_pass(engine, prompts, sp)["tokens_per_s"])
    return on_off_summary(runs)


def ab_join(plain: Engine, mtp: Engine, prompts, sp, pairs: int) -> dict:
    """Rows leaving and joining after a settle (off: as before stop 41), then routed through
    the launcher thread without one (on)."""
    return ab_setting(plain, mtp, prompts, sp, pairs, lambda e, on: setattr(e, "route_joins", on))


def parse_join_waits(text: str) -> tuple[int, int]:
    """'0,8' -> (0, 8): the join gate's max_wait_steps off, then on."""
    try:
        off, on = (int(x) for x in text.split(","))
    except ValueError:
        off = on = -1
    if min(off, on) < 0:
        raise SystemExit(
            f"--ab-join-wait={text!r}: give two step counts >= 0, off then on, e.g. 0,8"
        )
    return off, on


def ab_join_wait(plain: Engine, mtp: Engine, prompts, sp, pairs: int, waits: tuple[int, int]):
    """Waiting rows joining at once (off: max_wait_steps waits[0], 0 as before stop 58), then
    held up to waits[1] steps to join several at a time (workers/join_gate.py). A gate
    learns its price in the passes it is on (an engine feeds it only then) and keeps it."""

    def apply(engine: Engine, on: bool) -> None:
        engine.join_gate.max_wait_steps = waits[on]

    return ab_setting(plain, mtp, prompts, sp, pairs, apply)


def ab_launch(make, prompts, sp, pairs: int) -> dict:
    """Per repeat: plain and MTP passes with workers/launch.py's launcher thread off, then on
    (in turns: `rotated`); each engine built with the setting (it is read at construction),
    all four in one process."""
    from bench.gpu import env_off
    from workers import launch

    engines = {
        "plain_off": env_off(lambda: make(False), launch.ENV)(),
        "mtp_off": env_off(lambda: make(True), launch.ENV)(),
        "plain_on": make(False),
        "mtp_on": make(True),
    }
    for engine in engines.values():  # warm: every shape's kernels and graphs built once
        engine.generate(prompts, sp)
    runs: dict[str, list[float]] = {k: [] for k in engines}
    for rep in range(pairs):
        for state in rotated(["off", "on"], rep):
            for kind in ("plain", "mtp"):  # each MTP pass right after its plain pass
                name = f"{kind}_{state}"
                runs[name].append(timed_pass(engines[name], prompts, sp)["tokens_per_s"])
    return on_off_summary(runs)


def _job_end_drain_only(policy: DepthPolicy) -> None:
    """The job-end rule only once every waiting row fits in a free slot (the batch drains)."""
    view = policy.job_view
    if view is None:
        return

    def drain_only() -> DrainingRows | None:
        v = view()
        return v if v is not None and len(v.waiting) <= v.free_slots else None

    policy.job_view = drain_only


def _probing(policy: DepthPolicy) -> None:
    policy.job_end = policy.live_probes = True


# Depth-policy variants `--ab-policy` can run, each set on an adaptive engine's policy before
# any live round; "fixed" is MTP at fixed --depth (no policy).
POLICY_VARIANTS: dict[str, Callable[[DepthPolicy], None] | None] = {
    "as_is": lambda p: None,
    "no_cap": lambda p: setattr(p, "cap_by_larger", False),  # priced by its own cells only
    "no_job_end": lambda p: setattr(p, "job_view", None),  # tokens per second decide throughout
    "margin_min": lambda p: setattr(p, "error_sigmas", 0.0),  # a gain clears min_gain alone
    "job_end_drain_only": _job_end_drain_only,  # the rule once the queue fits the free slots
    # Every round at the top depth with the policy's own per-round and per-join host work
    # (observe, the join's `settled_plain`): against "fixed", what that work costs; against
    # "as_is", what the policy's choices cost.
    "forced_max": lambda p: setattr(p, "forced", p.max_depth),
    "no_hold": lambda p: setattr(p, "hold_depth", False),  # as before stop 39
    "no_explore": lambda p: setattr(p, "explore_every", 0),  # no exploration rounds
    # Every bucket counted warm, as if the warm-up had probed them all: no live probe rounds
    "no_probe": lambda p: setattr(p, "live_probes", False),
    # Both: no job-end rule and no live probes (stop 59's; MLX CUDA's default since)
    "lean": lambda p: (setattr(p, "live_probes", False), setattr(p, "job_end", False)),
    # The CUDA policy before stop 59: buckets probed on traffic, the job-end rule on (where
    # they are off: MLX CUDA)
    "probing": _probing,
    # Each bucket's probe without its closing plain rounds (two switches fewer a bucket)
    "no_rerun": lambda p: setattr(p, "probe_rerun", False),
    # A fresh choice every 32 rounds of a batch size, not 8: a quarter of the fits and job views
    "refresh_32": lambda p: setattr(p, "refresh_every", 32),
    "fixed": None,
    "fixed_3": None,  # MTP at fixed depth 3 (whatever --depth is), no policy
    "fixed_2": None,
    "verify_64": lambda p: None,  # as_is on an engine whose verify carries <= 64 tokens
}
# Variants that are engine settings, given to `make` (read at construction): at B = 16 a
# 64-token verify caps drafting at depth 3, and its padded graph at [16, 4] (stop 57: depth 3
# held read 1.50x plain where the policy, padding to depth 4's 80 rows, read 1.06-1.14; stop
# 59, both warmed up, 8 pairs in one process: depth 2 / 3 / 4 held 1.10 / 1.18 / 1.21).
ENGINE_VARIANTS: dict[str, dict] = {
    "verify_64": {"max_verify_tokens": 64},
    "fixed_3": {"draft_depth": 3},
    "fixed_2": {"draft_depth": 2},
}


def ab_policy(make, prompts, sp, pairs: int, names: list[str]) -> dict:
    """Per repeat, for each variant in turn (`POLICY_VARIANTS`; the order rotated a place every
    repeat, `rotated`): a plain pass, then the variant's MTP pass; one engine per variant keeps
    its policy's state, all in one process (every shape built once for all of them in the warm
    passes). Each variant's figure is the median of its passes' ratios to the plain pass just
    before."""
    unknown = sorted(set(names) - set(POLICY_VARIANTS))
    if unknown:
        raise SystemExit(f"--ab-policy: unknown variants {unknown}; known: {list(POLICY_VARIANTS)}")
    plain = make(False)
    engines = {}
    for name in names:
        setting = POLICY_VARIANTS[name]
        engines[name] = make(True, adaptive=setting is not None, **ENGINE_VARIANTS.get(name, {}))
        if setting is not None:
            assert engines[name].depth_policy is not None
            setting(engines[name].depth_policy)
    for engine in (plain, *engines.values()):  # warm: every shape's kernels built once
        engine.generate(prompts, sp)
    runs: dict[str, list[float]] = {k: [] for k in ("plain", *names)}
    ratios: dict[str, list[float]] = {k: [] for k in names}
    for rep in range(pairs):
        for name in rotated(names, rep):
            base = timed_pass(plain, prompts, sp)["tokens_per_s"]
            runs["plain"].append(base)
            runs[name].append(timed_pass(engines[name], prompts, sp)["tokens_per_s"])
            ratios[name].append(runs[name][-1] / base)
    return {
        "tokens_per_s": {k: [round(x, 1) for x in v] for k, v in runs.items()},
        "summary": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "pairs": {k: [round(x, 3) for x in v] for k, v in ratios.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, max_tokens=96)
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--label", default="", help="what tree or setting this run measures")
    ap.add_argument("--ab-row-linear", action="store_true",
                    help="each pair twice, linears as per-row gemvs off then on (workers/row_linear.py)")  # fmt: skip
    ap.add_argument("--ab-row-limits", metavar="ROWS:MIB,ROWS:MIB",
                    help="each pair twice, the per-row gemv route's ROWS_MAX and ROW_BYTES_MAX "
                    "(MiB, or inf) at the first limits (off) then the second (on); stop 56's "
                    "--ab-rows-max 128 was 32:inf,128:inf")  # fmt: skip
    ap.add_argument("--ab-join", action="store_true",
                    help="instead of the pairs: plain and MTP with rows leaving and joining after "
                    "a settle (off) and routed through the launcher thread (on), in turns")  # fmt: skip
    ap.add_argument("--ab-join-wait", metavar="OFF,ON",
                    help="each pair twice, waiting rows held at most OFF then ON steps to join "
                    "several at a time (workers/join_gate.py; 0: at once), e.g. 0,8")  # fmt: skip
    ap.add_argument("--ab-launch", action="store_true",
                    help="instead of the pairs: plain and MTP with workers/launch.py's launcher "
                    "thread off and on, in turns (engines built with each setting)")  # fmt: skip
    ap.add_argument("--ab-policy", metavar="VARIANTS",
                    help="with --adaptive: instead of the pairs, these depth-policy variants "
                    f"(comma-separated, of {list(POLICY_VARIANTS)}), each in turn after a plain "
                    "pass, in one process (stop 35's bare --ab-policy: no_cap,as_is,fixed)")  # fmt: skip
    ap.add_argument("--adaptive", action="store_true",
                    help="MTP as a serving worker runs it: adaptive depth up to --depth, every "
                    "depth timed at startup (both engines warm up)")  # fmt: skip
    ap.add_argument("--spread", type=float, default=0.0,
                    help="each prompt's max tokens drawn uniformly within +- this share of "
                    "--max-tokens (seeded): rows end apart, as served requests do; 0: all equal")  # fmt: skip
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.ab_policy and not args.adaptive:
        ap.error("--ab-policy compares adaptive engines: add --adaptive")
    served = {"adaptive_depth": True, "warm_up": True} if args.adaptive else {}
    prompts = heldout_prompts(args.model_dir, args.prompts)
    sp = spread_params(len(prompts), args.max_tokens, args.spread)  # spread 0: all equal
    rows: dict = {}

    def save() -> None:
        """Write what is measured so far (after every batch size and every A/B), so a run cut
        short by its time limit (a device run's) keeps what it finished; written aside, then
        renamed, so a kill mid-write leaves the last whole file."""
        if args.out:
            tmp = args.out.with_name(args.out.name + ".tmp")
            tmp.write_text(json.dumps({
                "label": args.label, "model_dir": str(args.model_dir),
                "device": str(mx.default_device()), "mlx": mx.__version__,
                "max_tokens": args.max_tokens, "depth": args.depth, "prompts": args.prompts,
                "adaptive": args.adaptive, "spread": args.spread,
                "batch": rows}, indent=1))  # fmt: skip
            os.replace(tmp, args.out)

    for B in [int(b) for b in args.batch_sizes.split(",")]:
        save()
        if args.ab_launch or args.ab_policy:

            def make(
                mtp: bool, B: int = B, adaptive: bool = args.adaptive, **config: object
            ) -> Engine:
                if not mtp:
                    return Engine.load(args.model_dir, max_batch_size=B, warm_up=args.adaptive)
                # A fixed depth warms up too (on MLX CUDA, every shape built before the timed
                # passes; without it, stop 59's "fixed" paid builds the draining sizes met
                # in them: 1.19x plain at B = 16 where "forced_max" read 1.48x)
                settings = {  # a variant's own settings win (ENGINE_VARIANTS)
                    "draft_depth": args.depth, "warm_up": args.adaptive,
                    "adaptive_depth": adaptive, **config,
                }  # fmt: skip
                return Engine.load(args.model_dir, drafter="mtp", max_batch_size=B, **settings)

            if args.ab_policy:
                name = "policy"
                rows[f"{B} {name}"] = ab_policy(
                    make, prompts, sp, args.pairs, args.ab_policy.split(",")
                )
            else:
                name = "launch"
                rows[f"{B} {name}"] = ab_launch(make, prompts, sp, args.pairs)
            print(f"{args.label} B={B}: {json.dumps(rows[f'{B} {name}']['summary'])}", flush=True)
            continue
        plain = Engine.load(args.model_dir, max_batch_size=B, warm_up=args.adaptive)
        mtp = Engine.load(
            args.model_dir, drafter="mtp", max_batch_size=B, draft_depth=args.depth, **served
        )
        for engine in (plain, mtp):  # warm: every shape's kernels and graphs built once
            engine.generate(prompts, sp)
        if args.ab_join:
            rows[f"{B} join"] = ab_join(plain, mtp, prompts, sp, args.pairs)
            print(f"{args.label} B={B}: {json.dumps(rows[f'{B} join']['summary'])}", flush=True)
            continue
        if args.ab_join_wait:
            waits = parse_join_waits(args.ab_join_wait)
            rows[f"{B} join_wait"] = ab_join_wait(plain, mtp, prompts, sp, args.pairs, waits)
            summary = rows[f"{B} join_wait"]["summary"]
            print(f"{args.label} B={B}: {json.dumps(summary)}", flush=True)
            continue
        if args.ab_row_linear or args.ab_row_limits:
            limits = parse_row_limits(args.ab_row_limits) if args.ab_row_limits else None
            rows[f"{B} row_linear"] = ab_row_linear(plain, mtp, prompts, sp, args.pairs, limits)
            save()
            print(
                f"{args.label} B={B}: {json.dumps(rows[f'{B} row_linear']['summary'])}", flush=True
            )
        pairs = [(timed_pass(plain, prompts, sp), timed_pass(mtp, prompts, sp))
                 for _ in range(args.pairs)]  # fmt: skip
        ratios = [m["tokens_per_s"] / p["tokens_per_s"] for p, m in pairs]
        same = sum(a == b for a, b in zip(pairs[0][0]["outputs"], pairs[0][1]["outputs"]))
        rows[str(B)] = {
            "mtp_over_plain_median": statistics.median(ratios),
            "mtp_over_plain_pairs": [round(r, 3) for r in ratios],
            "plain_tokens_per_s": [round(p["tokens_per_s"], 1) for p, _ in pairs],
            "mtp_tokens_per_s": [round(m["tokens_per_s"], 1) for _, m in pairs],
            "accepted_per_row_round": pairs[0][1]["accepted_per_row_round"],
            "mtp_rows_equal_to_plain": f"{same}/{len(prompts)}",
        }
        r = rows[str(B)]
        print(f"{args.label} B={B}: MTP/plain {r['mtp_over_plain_median']:.2f} "
              f"{r['mtp_over_plain_pairs']} plain {r['plain_tokens_per_s']} "
              f"accepted {r['accepted_per_row_round']:.2f} same {same}", flush=True)  # fmt: skip
    save()


if __name__ == "__main__":
    main()
