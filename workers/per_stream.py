"""`mx.compile` traces kept per stream, for the custom kernels a forward calls many times.

A custom kernel's call (`mx.fast.cuda_kernel`) writes out the kernel's source with its template
values on the host at every call; called through a function `mx.compile` traced once per shape,
it replays the traced primitive instead (H200: 10-15 us of Python a call against 3.5-5.5, and
8-11 against 10-14 us of MLX's encode; the same kernel, so the same bits:
bench/results/s64/device/kernel_call_cost.py). A trace runs on the stream it was made on, so
each stream gets its own (workers/launch.py gives an engine that launches from a thread a stream
of its own), as workers/compiled_step.py keys its traces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx

MAX_STREAMS = 64  # compiled functions kept per table; past this they are traced again


def compiled_call(table: dict[str, Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`mx.compile(fn)` for the calling thread's default stream, made once per stream and kept
    in `table`."""
    stream = str(mx.default_stream(mx.default_device()))
    compiled = table.get(stream)
    if compiled is None:
        if len(table) >= MAX_STREAMS:
            table.clear()
        compiled = table[stream] = mx.compile(fn)
    return compiled
