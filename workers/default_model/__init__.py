"""specfleet's embedded default model (see README.md here): paths and an offline loader.

Importing this module is mlx-free (paths only); `load_default` imports mlx-lm lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent
TARGET_DIR = DEFAULT_MODEL_DIR / "target"  # qwen3 target + mtp.safetensors + tokenizer
DRAFT_DIR = DEFAULT_MODEL_DIR / "draft"  # small qwen3 draft model, same tokenizer
HELDOUT_PROMPTS = DEFAULT_MODEL_DIR / "heldout_prompts.jsonl"  # OpenAI Batch input lines


def load_default(dtype: Any | None = None) -> tuple[Any, Any, Any, Any]:
    """(target, tokenizer, draft, mtp_head), loaded offline from the package.

    Weights ship as fp16; `dtype=None` upcasts to fp32 on CPU, where MLX's fp16 matmuls are
    5-30x slower than fp32 (no half-precision BLAS), and keeps fp16 on a GPU.
    """
    import mlx.core as mx
    import mlx_lm

    from workers.mtp.loader import load_mtp_head

    if not (TARGET_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"embedded default model missing at {TARGET_DIR}; reinstall specfleet or run "
            "`python -m train.train_default` to rebuild it"
        )
    if dtype is None:
        dtype = mx.float32 if mx.default_device() == mx.cpu else mx.float16
    target, tokenizer = mlx_lm.load(str(TARGET_DIR))[:2]
    draft = mlx_lm.load(str(DRAFT_DIR))[0]
    mtp = load_mtp_head(TARGET_DIR)
    for m in (target, draft, mtp):
        m.set_dtype(dtype)
    return target, tokenizer, draft, mtp
