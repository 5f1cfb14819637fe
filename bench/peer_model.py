"""A random Qwen3.5-shape checkpoint with a fitted MTP head, in the Hugging Face layout.

    .venv/bin/python -m bench.peer_model --out /tmp/q35 [--preset cpu|1b] [--hidden-size ...]

Every system in bench/peers.py loads these same files with its own loader: mlx-lm and specfleet
(`Engine.load`, MTP head via workers/mtp/loader.py) and mlx-vlm (`mlx_vlm.utils.load` plus
`load_drafter`, which splits the `mtp.*` tensors out in memory). The layout is what a real
Qwen3.5 checkpoint ships, so each loader runs its real conversion path:
    model.language_model.*   backbone (mlx-lm / mlx-vlm rename it to language_model.model.*)
    conv1d.weight            [C, 1, K] PyTorch order (both loaders move the axis)
    RMSNorm weights          stored as w - 1 (both loaders add 1; GatedDeltaNet's norm is not)
    mtp.*                    one-layer MTP head, norms also stored as w - 1
    metadata format=pt       (mlx-vlm skips its MTP sanitize for format=mlx files)
The target is random, scaled so that its next token depends mostly, not only, on the last token
(embeddings x10, mixer/MLP output projections x0.1, untied lm_head): a plain random deep model's
argmax is a hash of the whole context that no head learns in minutes (fitted depth-1 agreement
stayed at 0%), while this one behaves like a language model in the way that matters here. The MTP
head is fitted with Adam to the target's greedy choices on random text (~250 steps: depth-1
agreement ~0.6 on the target's greedy continuations), so acceptance is non-trivial.
The checkpoint has no `specfleet_mtp_hidden` key, so specfleet reads it with Qwen3.5's post-norm
convention (target hidden after the final norm, chained hidden after mtp.norm), as mlx-vlm does;
the head is fitted on that hidden. (The final norm weight stays 1.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_map_with_path

from train.artifacts import TOKENIZER_FILES

# RMSNorm weights that Hugging Face Qwen3.5 checkpoints store as (w - 1).
SHIFTED_SUFFIXES = (
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
    "model.norm.weight",
)
MTP_SHIFTED_SUFFIXES = (
    *SHIFTED_SUFFIXES,
    "pre_fc_norm_hidden.weight",
    "pre_fc_norm_embedding.weight",
    "norm.weight",
)


@dataclass
class Qwen35Shape:
    """Sizes of the hybrid target (every `full_attention_interval`-th layer is full attention)."""

    hidden_size: int = 384
    num_hidden_layers: int = 8
    intermediate_size: int = 1024
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64
    linear_num_key_heads: int = 4
    linear_num_value_heads: int = 8
    linear_key_head_dim: int = 48
    linear_value_head_dim: int = 48
    full_attention_interval: int = 4
    vocab_size: int = 8192

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Qwen35Shape.{name}={value} must be positive")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.num_hidden_layers < self.full_attention_interval:
            raise ValueError(
                f"num_hidden_layers={self.num_hidden_layers} < full_attention_interval="
                f"{self.full_attention_interval}: the model would have no full-attention layer"
            )

    def text_config(self) -> dict[str, Any]:
        rotary_half = int(self.head_dim * 0.25) // 2  # partial_rotary_factor 0.25, as Qwen3.5
        t, h = rotary_half * 11 // 32, rotary_half * 11 // 32  # Qwen3.5's [11, 11, 10] split
        return {
            **asdict(self),
            "model_type": "qwen3_5_text",
            "linear_conv_kernel_dim": 4,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mtp_num_hidden_layers": 1,
            "rope_parameters": {
                "type": "default",
                "rope_theta": 10000000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [t, h, rotary_half - t - h],
                "mrope_interleaved": True,
            },
        }


PRESETS = {
    "tiny": Qwen35Shape(
        hidden_size=128,
        num_hidden_layers=4,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        vocab_size=1024,
    ),
    "cpu": Qwen35Shape(),
    # ~1B: Qwen3.5-2B's layer shapes, 16 layers, a 32k vocabulary (for the lent GPU).
    "1b": Qwen35Shape(
        hidden_size=2048,
        num_hidden_layers=16,
        intermediate_size=6144,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        vocab_size=32768,
    ),
}


# Residual-branch output projections (attention, GatedDeltaNet, MLP): scaled down so the
# residual stream keeps the current token's embedding (scaled up) as its largest part.
BRANCH_OUT = ("o_proj.weight", "out_proj.weight", "down_proj.weight")


def build_target(shape: Qwen35Shape, seed: int = 0) -> Any:
    """A random mlx-lm qwen3_5 model whose greedy next token leans on the last token."""
    from mlx_lm.models import qwen3_5

    def scale(path: str, p: mx.array) -> mx.array:
        if p.ndim != 2:
            return p
        if path.endswith(BRANCH_OUT):
            return p * 0.1
        return p * (10.0 if "embed_tokens" in path else 2.0)

    mx.random.seed(seed)
    config = {"model_type": "qwen3_5", "text_config": shape.text_config()}
    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(config))
    model.update(tree_map_with_path(scale, model.parameters()))
    mx.eval(model.parameters())
    return model


def fit_head(target: Any, steps: int, seed: int = 0, batch: int = 8, length: int = 32) -> Any:
    """A one-layer Qwen3.5-layout MTP head fitted to the target's greedy next tokens.

    The pair (h_t, x_{t+1}) learns the target's argmax after x_{t+1}, on random token
    sequences (fresh each step: a fixed set is memorised, not generalised). lr 1e-2 (what
    tests/tiny.py uses on hidden 64) diverges at this size; 1.5e-3 does not.
    """
    import mlx.nn as nn
    import mlx.optimizers as optim

    from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
    from workers.mtp.qwen35 import MTPArgs, MTPHead

    text = target.language_model.args
    cfg = {**vars(text), "model_type": "qwen3_5", "mtp_num_hidden_layers": 1}
    mx.random.seed(seed)
    head = MTPHead(MTPArgs.from_target_config(cfg))
    rng = np.random.default_rng(seed)

    def loss_fn(head: Any, h: mx.array, x: mx.array, y: mx.array) -> mx.array:
        out = head(h[:, :-1], embed(target, x[:, 1:]), mask="causal")  # [B, L-1, H]
        return nn.losses.cross_entropy(lm_head(target, out), y[:, 1:]).mean()

    opt = optim.Adam(learning_rate=1.5e-3)
    step = nn.value_and_grad(head, loss_fn)
    vocab = int(text.vocab_size)
    for _ in range(steps):
        x = mx.array(rng.integers(0, vocab, size=(batch, length)))
        h, logits = target_hidden_and_logits(target, x, post_norm=head.args.post_norm)
        loss, grads = step(head, mx.stop_gradient(h), x, mx.argmax(logits, -1))
        opt.update(head, grads)
        mx.eval(head.parameters(), opt.state, loss)
    head.final_loss = float(loss.item())  # type: ignore[attr-defined]
    return head


def hf_weights(target: Any, head: Any) -> dict[str, mx.array]:
    """mlx-lm parameter names/layouts -> the Hugging Face Qwen3.5 checkpoint layout."""
    out: dict[str, mx.array] = {}
    for key, value in tree_flatten(target.parameters()):
        if key == "language_model.lm_head.weight":
            out["lm_head.weight"] = value
            continue
        assert key.startswith("language_model.model."), key
        name = "model.language_model." + key[len("language_model.model.") :]
        if name.endswith("conv1d.weight"):
            value = value.moveaxis(2, 1)  # mlx [C, K, 1] -> torch [C, 1, K]
        if value.ndim == 1 and name.endswith(SHIFTED_SUFFIXES):
            value = value - 1.0
        out[name] = value
    for key, value in tree_flatten(head.parameters()):
        if value.ndim == 1 and key.endswith(MTP_SHIFTED_SUFFIXES):
            value = value - 1.0
        out["mtp." + key] = value
    return out


def save_checkpoint(
    path: Path,
    shape: Qwen35Shape,
    target: Any,
    head: Any,
    dtype: str,
    tokenizer: Path | None = None,
) -> None:
    """Write the checkpoint; `tokenizer` is a directory whose tokenizer files are copied (else a
    tiny byte-level tokenizer: the random peer is fed token ids)."""
    path.mkdir(parents=True, exist_ok=True)
    weights = {k: v.astype(getattr(mx, dtype)) for k, v in hf_weights(target, head).items()}
    shards = {
        "model.safetensors": {k: v for k, v in weights.items() if not k.startswith("mtp.")},
        "mtp.safetensors": {k: v for k, v in weights.items() if k.startswith("mtp.")},
    }
    for name, tensors in shards.items():
        mx.save_safetensors(str(path / name), tensors, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: n for n, t in shards.items() for k in t}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    config = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "text_config": shape.text_config(),
    }
    (path / "config.json").write_text(json.dumps(config, indent=1))
    if tokenizer is not None:
        for name in TOKENIZER_FILES:
            shutil.copy(tokenizer / name, path / name)
        return
    from tests.tiny import make_tiny_tokenizer

    # Byte-level BPE with ids < 256: the benchmark feeds token ids, the loaders want a tokenizer.
    make_tiny_tokenizer()._tokenizer.save_pretrained(str(path))


def build(path: Path, shape: Qwen35Shape, fit_steps: int, seed: int = 0, dtype: str = "float32"):
    """Write the checkpoint unless `path` already holds one of the same shape; returns info."""
    info_path = path / "peer_model.json"
    want = {"shape": asdict(shape), "fit_steps": fit_steps, "seed": seed, "dtype": dtype}
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if {k: info.get(k) for k in want} == want:
            return info
    t0 = time.perf_counter()
    target = build_target(shape, seed)
    head = fit_head(target, fit_steps, seed)
    save_checkpoint(path, shape, target, head, dtype)
    params = sum(v.size for _, v in tree_flatten(target.parameters()))
    mtp_params = sum(v.size for _, v in tree_flatten(head.parameters()))
    info = {
        **want,
        "target_params": int(params),
        "mtp_params": int(mtp_params),
        "fit_loss": head.final_loss,
        "build_seconds": time.perf_counter() - t0,
    }
    info_path.write_text(json.dumps(info, indent=1))
    return info


def add_shape_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    for name in asdict(Qwen35Shape()):
        ap.add_argument("--" + name.replace("_", "-"), type=int, help="overrides the preset")
    ap.add_argument("--fit-steps", type=int, default=250, help="Adam steps fitting the MTP head")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])


def shape_from_args(args: argparse.Namespace) -> Qwen35Shape:
    base = asdict(PRESETS[args.preset])
    over = {k: getattr(args, k) for k in base if getattr(args, k, None) is not None}
    return Qwen35Shape(**{**base, **over})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    add_shape_args(ap)
    args = ap.parse_args()
    info = build(Path(args.out), shape_from_args(args), args.fit_steps, dtype=args.dtype)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
