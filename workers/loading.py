"""Model and drafter loading for Engine.load: mlx-lm directories, drafter specs, CPU dtype."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from workers.drafters.base import Drafter

log = logging.getLogger(__name__)


def quantized_layers(model: Any) -> list[tuple[str, nn.Module]]:
    """(path, module) of every quantized Linear / Embedding (mlx-community, specfleet convert)."""
    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    return [(name, m) for name, m in model.named_modules() if isinstance(m, kinds)]


def dequantize_layers(model: Any) -> int:
    """Swap each quantized layer for a float32 one holding its exact values; returns how many.

    The scales go to fp32 before dequantizing: an fp16 scale times a 4- or 8-bit code needs up
    to 19 significant bits, which an fp16 result would round."""
    from mlx.utils import tree_unflatten

    swapped = []
    for name, m in quantized_layers(model):
        biases = m.biases.astype(mx.float32) if m.biases is not None else None
        w = mx.dequantize(
            m.weight, m.scales.astype(mx.float32), biases, m.group_size, m.bits, m.mode
        )  # [out, in] (Linear) or [vocab, dims] (Embedding)
        if isinstance(m, nn.QuantizedEmbedding):
            new: nn.Module = nn.Embedding(*w.shape)
        else:
            new = nn.Linear(w.shape[1], w.shape[0], bias="bias" in m)
            if "bias" in m:
                new.bias = m.bias.astype(mx.float32)
        new.weight = w
        swapped.append((name, new))
    if swapped:
        model.update_modules(tree_unflatten(swapped))
    return len(swapped)


def upcast_on_cpu(model: Any, keep_quantized: bool = False) -> Any:
    """On the CPU, run half-precision checkpoints in fp32 and quantized ones dequantized to
    fp32: MLX's CPU backend has no fast half-precision matmul (5-30x slower than fp32, see
    workers/default_model/README.md) and its quantized matmuls are slower still (~40x on
    SmolLM2-135M, issue 15). keep_quantized=True keeps quantized layers as they are (the
    memory they save, at that speed); a Mac's GPU runs them as they come either way."""
    from mlx.utils import tree_flatten

    if mx.default_device() != mx.cpu:
        return model
    if not keep_quantized and (n := dequantize_layers(model)):
        log.info("CPU: dequantized %d quantized layers to float32 (keep_quantized=False)", n)
    params: Any = tree_flatten(model.parameters())
    if {v.dtype for _, v in params} & {mx.float16, mx.bfloat16}:
        model.set_dtype(mx.float32)
    return model


def embedding_rows(model: object) -> int:
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if embed is None:
        raise ValueError("cannot tell the vocabulary size: the model has no args.vocab_size")
    return int(embed.weight.shape[0])


def make_drafter(spec: str | Drafter | None, model_dir: Path, model: object) -> Drafter | None:
    if spec is None or not isinstance(spec, str):
        return spec
    if spec == "ngram":
        from workers.drafters.ngram import NgramDrafter

        return NgramDrafter()
    if spec.startswith("model:") or spec == "model":
        from mlx_lm import load

        from workers.drafters.model import ModelDrafter

        path = spec[len("model:") :] if spec.startswith("model:") else ""
        draft_dir = Path(path) if path else model_dir.parent / "draft"
        # A draft stays quantized only beside a target that did (keep_quantized on the CPU).
        keep = bool(quantized_layers(model))
        return ModelDrafter(upcast_on_cpu(load(str(draft_dir))[0], keep_quantized=keep))
    if spec == "mtp":
        from workers.drafters.mtp import MTPDrafter
        from workers.drafters.mtp_host import HostMTPDrafter, host_head_wanted

        drafter = MTPDrafter.from_target(model, model_dir)
        return HostMTPDrafter.from_mtp(drafter) if host_head_wanted(drafter) else drafter
    raise ValueError(
        f"drafter={spec!r} is not known: use None, 'ngram', 'mtp', 'model' or 'model:PATH'"
    )
