"""Where an MTP engine held at depth 0 loses to a plain engine (GPU probe; prints only).

python -m bench.depth0_probe [--batch-size 8]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from workers import Engine, SamplingParams
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    B = args.batch_size
    prompts = heldout_prompts(32)
    sp = SamplingParams(max_tokens=64, ignore_eos=True)
    plain = Engine.load(None, drafter=None, max_batch_size=B)
    from workers.config import DEFAULT_MODEL_DIR
    from workers.loading import make_drafter

    def mtp(**kw):
        return Engine(plain.model, plain.tokenizer, max_batch_size=B, draft_depth=3,
                      drafter=make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model), **kw)  # fmt: skip

    zero = mtp(adaptive_depth=True)
    zero.depth_policy.choose = lambda batch_size: 0  # type: ignore[union-attr,method-assign]
    engines = {"plain": plain, "mtp_depth0": zero, "mtp_adaptive": mtp(adaptive_depth=True),
               "mtp_fixed3": mtp()}  # fmt: skip
    for e in engines.values():
        e.generate(prompts, sp)
    for _ in range(2):
        for name, e in engines.items():
            e.take_round_stats()
            t0 = time.perf_counter()
            e.generate(prompts, sp)
            dt = time.perf_counter() - t0
            st = [s for s in e.take_round_stats() if s.batch_size]
            drafts = sum(s.num_draft_tokens for s in st)
            print(
                f"{name}: {2048 / dt:.0f} tok/s, {len(st)} rounds, {dt / len(st) * 1e3:.2f} ms/round, drafts {drafts}",
                flush=True,
            )
    for name in ("mtp_fixed3", "mtp_adaptive"):
        pr = cProfile.Profile()
        pr.enable()
        engines[name].generate(prompts, sp)
        pr.disable()
        print("=====", name)
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
        if name == "mtp_adaptive":
            import collections

            st = engines[name].take_round_stats()
            print(
                "depths",
                collections.Counter(
                    s.num_draft_tokens // max(s.num_drafts, 1) for s in st if s.batch_size
                ),
            )


if __name__ == "__main__":
    main()
