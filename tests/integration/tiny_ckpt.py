"""Tiny random llama target + perturbed draft written as mlx-lm model directories."""

from __future__ import annotations

import json
from pathlib import Path


def write_tiny_checkpoints(d: Path) -> tuple[Path, Path]:
    from tests.tiny import make_tiny_tokenizer, perturbed, save_tiny_checkpoint, tiny_model

    tok = make_tiny_tokenizer()
    target = tiny_model("llama", seed=0)
    save_tiny_checkpoint(target, tok, d / "target")
    save_tiny_checkpoint(perturbed(target, scale=0.1, seed=1), tok, d / "draft")
    for sub in ("target", "draft"):  # transformers' config check wants an int context length
        cfg_path = d / sub / "config.json"
        cfg = {k: v for k, v in json.loads(cfg_path.read_text()).items() if v is not None}
        cfg["max_position_embeddings"] = 4096
        cfg_path.write_text(json.dumps(cfg))
    return d / "target", d / "draft"
