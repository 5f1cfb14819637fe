"""Stop 47: the host head's step in C (workers/mtp/host_step.c) against its NumPy step.

    PYTHONPATH=. python bench/results/s47/native_head_cpu.py DEPTH PROMPTS REPS ADAPTIVE [B]

Each held-out prompt (64 new tokens, EOS honoured) decoded by a plain engine and by two MTP
engines (the head on the host, as `Engine.load` picks on the CPU) at draft depth DEPTH
(ADAPTIVE 1: the most the policy may draft; 0: fixed), in turns, warm, every output checked
equal to plain's:
- `native`: this stop's step, one call into C (`HostHead.native`);
- `numpy`: the same drafter with `HostHead.step` run without C while it runs, the NumPy step
  as before this stop.
B (default 1) decodes the prompts B at a time. Prints plain's time over each engine's, per
pass and over all passes, and each engine's drafting rounds per request.
"""

from __future__ import annotations

import contextlib
from typing import Any

from bench.turns import ab_main, patched
from workers.mtp.host_head import HostHead

_step = HostHead.step


def _numpy_step(self: HostHead, *args: Any) -> Any:
    """HostHead.step without its C route (the NumPy step, as before this stop)."""
    native, self.native = self.native, None
    try:
        return _step(self, *args)
    finally:
        self.native = native


def main() -> None:
    ab_main({"native": contextlib.nullcontext,
             "numpy": lambda: patched(HostHead, "step", _numpy_step)})  # fmt: skip


if __name__ == "__main__":
    main()
