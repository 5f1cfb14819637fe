"""Fixed vs adaptive MTP depth on one engine model, interleaved (GPU probe; prints only).

    python -m bench.adaptive_probe [--batch-sizes 8,32] [--repeats 3]

Per run: tokens/s, rounds, drafted tokens, and the host seconds spent inside the depth
policy (choose + observe), to tell the policy's own cost from what its choices cost.
"""

from __future__ import annotations

import argparse
import collections
import time

from workers import Engine, SamplingParams
from workers.config import DEFAULT_MODEL_DIR
from workers.loading import make_drafter
from workers.stream_speed import heldout_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    prompts = heldout_prompts(32)
    sp = SamplingParams(max_tokens=64, ignore_eos=True)
    plain = Engine.load(None, drafter=None)
    for B in [int(b) for b in args.batch_sizes.split(",")]:

        def make(adaptive: bool, B: int = B) -> Engine:
            drafter = make_drafter("mtp", DEFAULT_MODEL_DIR / "target", plain.model)
            return Engine(plain.model, plain.tokenizer, drafter=drafter, max_batch_size=B,
                          draft_depth=3, adaptive_depth=adaptive)  # fmt: skip

        engines = {"fixed": make(False), "adaptive": make(True), "pinned3": make(True),
                   "3_every8th_0": make(True), "3_every8th_2": make(True)}  # fmt: skip
        for name, other in (("pinned3", 3), ("3_every8th_0", 0), ("3_every8th_2", 2)):
            pinned = engines[name].depth_policy
            assert pinned is not None
            calls = iter(range(10**9))
            pinned.choose = lambda batch_size, _c=calls, _o=other: (  # type: ignore[method-assign]
                _o if next(_c) % 8 == 7 else 3
            )
        spent = {"s": 0.0}
        policy = engines["adaptive"].depth_policy
        assert policy is not None
        for fn in ("choose", "observe"):
            orig = getattr(policy, fn)

            def timed(*a, _orig=orig, _spent=spent, **k):
                t0 = time.perf_counter()
                try:
                    return _orig(*a, **k)
                finally:
                    _spent["s"] += time.perf_counter() - t0

            setattr(policy, fn, timed)
        for e in engines.values():
            e.generate(prompts, sp)
        for _ in range(args.repeats):
            for name, e in engines.items():
                spent["s"] = 0.0
                e.take_round_stats()
                t0 = time.perf_counter()
                e.generate(prompts, sp)
                dt = time.perf_counter() - t0
                st = [s for s in e.take_round_stats() if s.batch_size]
                depths = collections.Counter(s.num_draft_tokens // max(s.num_drafts, 1) for s in st)
                print(f"B={B} {name}: {2048 / dt:.0f} tok/s, {len(st)} rounds, "
                      f"{dt / len(st) * 1e3:.2f} ms/round, policy {spent['s'] * 1e3:.0f} ms, "
                      f"depths {dict(sorted(depths.items()))}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
