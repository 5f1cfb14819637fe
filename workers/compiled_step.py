"""A one-attention-layer step over the ragged cache as one compiled graph per shape.

A drafter's step (the MTP head: one decoder layer, the shared lm_head) is small, so on a GPU its
cost is the host's: Python building ~80 lazy ops, then MLX encoding each (bench/graph_ops.py,
bench/dispatch_cost.py). `mx.compile` traces it once per shape and replays the trace, fusing
the elementwise chains. Compiled functions must be pure, so the layer's cache goes in and comes
out as arrays: the trace runs the step on a stand-in `BatchCache` whose device arrays (row
lengths, window counts, key and value slots) are the traced inputs, and the host values it
reads (the attention span, whether a lone row reads exactly its slots, the kernel route) are
part of the key that picks the trace. Storage grows outside the trace.

Used where each new shape already costs a graph build and spans are rounded (MLX CUDA,
`Backend.builds_per_shape`), so a trace serves many rounds. The drafts it makes only decide how
fast a round is, never what it emits: the verify is the target's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import cast

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from workers import row_linear
from workers.kv_cache import BatchCache
from workers.kv_layers import RaggedKVCache, reserve_slots
from workers.row_linear import RowLinear

Step = Callable[..., tuple[mx.array, ...]]  # (layer cache, *arrays) -> arrays
# "1" / "0": compile drafter steps or not, on any backend (unset: where builds_per_shape). The
# CPU's default is ops: with the head's spans rounded (MTPDrafter.compile_steps) compiled steps
# measured 1.03x at B=1 and 0.97-1.01x at B=8-16 on the 2-core CPU (bench/results/s37), and a
# fresh machine builds each fused kernel with g++ first (~9 s for the default model's).
COMPILE_ENV = "SPECFLEET_COMPILE_DRAFT"
MAX_TRACES = 256  # distinct (model, shape, span) keys kept; past this they are traced again
# Traces shared by every engine in the process: weights are inputs, not constants, so a fresh
# engine of the same model shapes (a new job's, a benchmark's) reuses them instead of tracing.
_TRACES: dict[tuple, Callable[..., list[mx.array]]] = {}


class CompiledStep:
    """`step(layer_cache, *inputs)` on `cache.layers[0]`, compiled per shape and span.

    `modules` are every module whose weights the step reads: they go into the compiled graph
    as inputs, and the modules' shapes, dtypes and settings are part of the trace's key. The
    weights are read here, once (a step is on the hot path): a model updated after this needs a
    new CompiledStep."""

    def __init__(self, step: Step, modules: list[nn.Module]):
        self.step, self.modules = step, modules
        flat = [_params(m) for m in modules]
        self._names = [[name for name, _ in f] for f in flat]
        self.weights = [a for f in flat for _, a in f]
        # The weights the per-row gemv route reads as views (workers/row_linear.py): the views
        # go in as inputs, made once, so the trace replays no view ops of its own per call.
        self._viewed: list[tuple[int, RowLinear]] = []  # (index in weights, its module)
        at = 0
        for m, f in zip(modules, flat):
            mine = {f"{n}.weight" if n else "weight": sub
                    for n, sub in m.named_modules() if type(sub) is RowLinear}  # fmt: skip
            self._viewed += [(at + j, mine[name]) for j, (name, _) in enumerate(f) if name in mine]
            at += len(f)
        self.views = [self.weights[i].T[None] for i, _ in self._viewed]  # made once, here
        self.signature = (
            getattr(step, "__qualname__", repr(step)),
            tuple(repr(getattr(m, "args", type(m).__name__)) for m in modules),
            # the classes make the calls (a linear routed through workers/row_linear.py or not)
            tuple(type(sub).__name__ for m in modules for _, sub in m.named_modules()),
            tuple((name, a.shape, a.dtype) for f in flat for name, a in f),
            # which calls the per-row route takes (benchmarks change them)
            (row_linear.ROWS_MAX, row_linear.ROW_BYTES_MAX),
        )

    def __call__(self, cache: BatchCache, width: int, *inputs: mx.array) -> tuple[mx.array, ...]:
        """Run the step for a window of `width` tokens (set_window_valid already called)."""
        layer = cache.layers[0]
        if len(cache.layers) != 1 or type(layer) is not RaggedKVCache or not layer.key_parts:
            return self.step(layer, *inputs)  # an empty or quantized cache: run it as ops
        needed = cache.window_end(width)
        layer.key_parts = reserve_slots(layer.key_parts, layer.key_parts, needed)
        layer.value_parts = reserve_slots(layer.value_parts, layer.value_parts, needed)
        keys, values = layer.key_parts[0], layer.value_parts[0]
        key = (
            self.signature, width, needed, cache.reads_exact_row(width), cache.kernel_attention,
            keys.shape, values.shape, tuple((x.shape, x.dtype) for x in inputs),
            # MLX traces again on another stream (an engine launching from its own thread,
            # workers/launch.py, and one that does not): a trace of its own
            str(mx.default_stream(mx.default_device())),
        )  # fmt: skip
        fn, tracing = _TRACES.get(key), None
        if fn is None:
            if len(_TRACES) >= MAX_TRACES:
                _TRACES.clear()
            tracing = [self, cache]
            fn = _TRACES[key] = mx.compile(_traced(tracing))
        *outs, layer.key_parts[0], layer.value_parts[0] = fn(
            *self.weights, *self.views, cache.lengths_mx, cache.window_valid_mx, keys, values,
            *inputs,
        )  # fmt: skip
        if tracing is not None:  # traced on that call: the table keeps no engine alive
            tracing.clear()
        return tuple(outs)


def _traced(tracing: list) -> Callable[..., list[mx.array]]:
    """The function mx.compile traces, once: `tracing` holds the CompiledStep and the cache
    whose host values the trace reads, and is emptied after the first call."""

    def run(*args: mx.array) -> list[mx.array]:
        step, cache = tracing  # a second trace of one key would be a bug: it fails here
        count = sum(len(names) for names in step._names)
        weights, views = args[:count], args[count : count + len(step._viewed)]
        lengths, valid, keys, values, *inputs = args[count + len(step._viewed) :]
        # The host values stand-in reads (lengths for the span, flags) are the real cache's
        # at trace time, and the key holds everything they decide.
        stand_in = copy.copy(cache)
        stand_in.lengths_mx, stand_in.window_valid_mx, stand_in._shared = lengths, valid, {}
        layer = RaggedKVCache(stand_in)
        layer.key_parts, layer.value_parts = [keys], [values]
        stand_in.layers = [layer]
        saved = [m.parameters() for m in step.modules]
        at = 0
        for m, names in zip(step.modules, step._names):  # trace with the weights as inputs
            m.update(tree_unflatten(list(zip(names, weights[at : at + len(names)]))))
            at += len(names)
        held = [module.lend_view(view) for (_, module), view in zip(step._viewed, views)]
        try:
            outs = step.step(layer, *inputs)
        finally:
            for (_, module), h in zip(step._viewed, held):
                module.restore_view(h)
            for m, params in zip(step.modules, saved):
                m.update(params)
        return [*outs, layer.key_parts[0], layer.value_parts[0]]

    return run


def _params(module: nn.Module) -> list[tuple[str, mx.array]]:
    """(dotted name, array) of every parameter, in a fixed order."""
    return cast(list[tuple[str, mx.array]], tree_flatten(module.parameters()))
