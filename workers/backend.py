"""What the MLX backend this engine runs on charges for, decided once per engine.

- `builds_per_shape` (MLX CUDA): a round or prefill whose shapes differ from the last ones
  costs a graph build (~15-40 ms on an H200), and padding is cheap. So every drafting round
  is one graph per batch size (drafts padded to draft_depth, or the fewer max_verify_tokens
  leaves a row there, workers/drafting.py; the MTP backlog's packed
  window rounded up to 8), and joiners prefill as one padded batch (whole jobs ran 10-20%
  slower in length groups there, bench/prefill_groups.py).
- `computes_in_launch` (the CPU): MLX's CPU queue admits ~10 tasks of 10 ops ahead, so
  launching round N computes most of it and finishes round N-1's tail. An engine with a depth
  policy waits for N-1 before launching an N of another shape (rows, depth) so each depth's time
  is its own: charged to N, that tail made plain rounds after drafting ones look 15% dearer to
  the policy (2-core CPU, B=16), which then drafted where plain decoding was faster. Between
  rounds of one shape the carried tails cancel, so they keep the overlap of building N with
  N-1's tail (a wait before every launch cost 6% of a plain engine at B=1, and made depth-3 MTP
  rounds 13.3 ms instead of ~11).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True)
class Backend:
    builds_per_shape: bool
    computes_in_launch: bool

    @classmethod
    def current(cls) -> Backend:
        gpu = mx.default_device() == mx.gpu
        return cls(builds_per_shape=gpu and mx.cuda.is_available(), computes_in_launch=not gpu)

    def wants(self, env: str, default: bool | None = None) -> bool:
        """A launch-saving route (per-row gemv linears, compiled drafter steps): the
        environment's "1" / "0" for `env`, else `default`, or where that is None, on where
        launches and shapes cost the most (builds_per_shape: MLX CUDA)."""
        setting = {"1": True, "0": False}.get(os.environ.get(env, ""))
        if setting is not None:
            return setting
        return self.builds_per_shape if default is None else default
