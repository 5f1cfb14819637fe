"""Find and load the MTP weights that mlx-lm drops, from a model directory.

mlx-lm's loaders strip `mtp.*` keys (qwen3_5/qwen3_next `sanitize`) or reject unknown keys
(qwen3), so we read them ourselves from every `*.safetensors` in the directory: the Hugging Face
layout keeps them inside `model-0000x-of-0000y.safetensors` (the index says which shard); the
embedded default model keeps them in a separate `mtp.safetensors` so `mlx_lm.load` stays happy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from workers.mtp.qwen35 import SHIFTED_NORM_MODEL_TYPES, MTPArgs, MTPHead

# Prefixes under which checkpoints store the MTP module (VL wrappers nest the text model).
MTP_PREFIXES = ("mtp.", "model.mtp.", "language_model.mtp.", "model.language_model.mtp.")


def read_config(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass an mlx-lm / Hugging Face model directory")
    return json.loads(path.read_text())


def has_mtp(model_dir: str | Path) -> bool:
    """True when config.json declares MTP layers (the weights are checked by load_mtp_head)."""
    cfg = read_config(model_dir)
    text = cfg.get("text_config", cfg)
    return bool(text.get("mtp_num_hidden_layers", cfg.get("mtp_num_hidden_layers", 0)))


def _strip(key: str) -> str | None:
    for p in MTP_PREFIXES:
        if key.startswith(p):
            return key[len(p) :]
    return None


def _is_norm(key: str, value: mx.array) -> bool:
    """RMSNorm weights: pre_fc_norm_*, norm, *_layernorm, q_norm, k_norm (1-D)."""
    return value.ndim == 1 and key.endswith(".weight") and "norm" in key.split(".")[-2]


def _shards(model_dir: Path) -> list[Path]:
    """Safetensors files that may hold MTP keys: per the HF index if present, else all."""
    index = model_dir / "model.safetensors.index.json"
    files = {p.name for p in model_dir.glob("*.safetensors")}
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        listed = {f for k, f in weight_map.items() if _strip(k) is not None}
        files = (files - set(weight_map.values())) | listed  # unindexed files (mtp.safetensors)
    return [model_dir / f for f in sorted(files)]


def read_mtp_weights(model_dir: str | Path) -> dict[str, mx.array]:
    """All MTP tensors of the directory, keyed without the `mtp.` prefix."""
    found: dict[str, mx.array] = {}
    for path in _shards(Path(model_dir)):
        for key, value in mx.load(str(path)).items():  # type: ignore[union-attr]
            name = _strip(key)
            if name is not None:
                found[name] = value
    return found


def load_mtp_head(
    model_dir: str | Path,
    target_config: dict[str, Any] | None = None,
    dtype: mx.Dtype | None = None,
) -> MTPHead:
    """Build the MTP head for `target_config` (default: the dir's config.json) and load it.

    The config's `specfleet_mtp_hidden` ('post_norm' when absent, see workers/mtp/qwen35.py)
    becomes `head.args.hidden_norm`. Raises ValueError naming the tensor when one is missing,
    unexpected or mis-shaped, and naming the key when a config value is invalid.
    """
    model_dir = Path(model_dir)
    config = target_config if target_config is not None else read_config(model_dir)
    try:
        args = MTPArgs.from_target_config(config)
    except ValueError as e:
        raise ValueError(f"{model_dir / 'config.json'}: {e}") from None
    head = MTPHead(args)
    flat: list[tuple[str, mx.array]] = tree_flatten(head.parameters())  # type: ignore[assignment]
    expected = {k: v.shape for k, v in flat}
    weights = read_mtp_weights(model_dir)
    if not weights:
        raise ValueError(
            f"config.json of {model_dir} declares mtp_num_hidden_layers={args.num_layers} but no "
            "`mtp.*` tensor is in any *.safetensors there; copy the MTP weights from the original "
            "Hugging Face checkpoint (mlx-lm conversions drop them) or use another drafter"
        )
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ValueError(
            f"MTP tensor 'mtp.{missing[0]}' is missing from {model_dir} "
            f"({len(missing)} missing: {', '.join('mtp.' + m for m in missing[:6])}); "
            "re-export the checkpoint with its MTP weights"
        )
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        raise ValueError(
            f"unexpected MTP tensor 'mtp.{unexpected[0]}' in {model_dir} "
            f"({len(unexpected)} unexpected); mtp_num_hidden_layers={args.num_layers} and "
            f"model_type={args.model_type!r} in config.json must match the checkpoint"
        )
    for name, shape in expected.items():
        got = tuple(weights[name].shape)
        if got != tuple(shape):
            raise ValueError(
                f"MTP tensor 'mtp.{name}' has shape {got}, expected {tuple(shape)} for "
                f"hidden_size={args.hidden_size} in config.json; the MTP weights do not belong "
                "to this target (check config.json and the checkpoint)"
            )
    if args.model_type in SHIFTED_NORM_MODEL_TYPES:
        # HF stores these RMSNorm weights as w - 1 (output = x * (1 + w)); mlx-lm's RMSNorm is x*w.
        weights = {k: (v + 1.0 if _is_norm(k, v) else v) for k, v in weights.items()}
    if dtype is not None:
        weights = {k: v.astype(dtype) for k, v in weights.items()}
    head.load_weights(list(weights.items()), strict=True)
    mx.eval(head.parameters())
    head.eval()
    return head
