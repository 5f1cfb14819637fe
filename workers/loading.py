"""Model and drafter loading for Engine.load: mlx-lm directories, drafter specs, CPU dtype."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx

from workers.drafters.base import Drafter


def upcast_on_cpu(model: Any) -> Any:
    """On the CPU, run half-precision checkpoints in fp32: MLX's CPU backend has no fast
    half-precision matmul (5-30x slower than fp32, see workers/default_model/README.md)."""
    from mlx.utils import tree_flatten

    if mx.default_device() == mx.cpu:
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
        return ModelDrafter(upcast_on_cpu(load(str(draft_dir))[0]))
    if spec == "mtp":
        from workers.drafters import mtp  # type: ignore[attr-defined]

        return mtp.MTPDrafter.from_target(model, model_dir)  # type: ignore[no-any-return]
    raise ValueError(
        f"drafter={spec!r} is not known: use None, 'ngram', 'mtp', 'model' or 'model:PATH'"
    )
