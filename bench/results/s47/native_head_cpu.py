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
from collections.abc import Iterator
from typing import Any

from bench.turns import ab_main
from workers.mtp.host_head import HostHead


@contextlib.contextmanager
def numpy_steps() -> Iterator[None]:
    real = HostHead.step

    def step(self: HostHead, *args: Any) -> Any:
        native, self.native = self.native, None
        try:
            return real(self, *args)
        finally:
            self.native = native

    HostHead.step = step  # type: ignore[method-assign]
    try:
        yield
    finally:
        HostHead.step = real  # type: ignore[method-assign]


def main() -> None:
    ab_main({"native": contextlib.nullcontext, "numpy": numpy_steps})


if __name__ == "__main__":
    main()
