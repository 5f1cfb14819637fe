"""Tokenizer training and mlx-lm directory writing for the default model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3

from train.corpus import EOS

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (GPT-2 pre-tokenisation) with EOS as the only special token (id 0)."""
    # Imported here: training on a GPU box from a pre-tokenized corpus needs no `tokenizers`.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def qwen3_config(
    *, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, inter: int, ctx: int
) -> dict[str, Any]:
    """config.json for a tied-embedding mlx-lm qwen3 model (head_dim 64)."""
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 64,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": ctx,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": 0,
        "torch_dtype": "float16",
    }


def build_qwen3(config: dict[str, Any]) -> qwen3.Model:
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def _fp16(module: nn.Module, prefix: str = "") -> dict[str, mx.array]:
    flat: list[tuple[str, mx.array]] = tree_flatten(module.parameters())  # type: ignore[assignment]
    return {prefix + k: v.astype(mx.float16) for k, v in flat}


META = {"format": "mlx"}
# What save_model_dir writes beside the weights: copy these to give a directory the tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def save_mtp(out: Path, mtp: nn.Module) -> None:
    """The MTP head's weights, fp16, as `mtp.*` keys in OUT/mtp.safetensors."""
    mx.save_safetensors(str(out / "mtp.safetensors"), _fp16(mtp, "mtp."), metadata=META)


def save_model_dir(
    out: Path,
    model: nn.Module,
    config: dict[str, Any],
    tokenizer: Tokenizer | None,
    mtp: nn.Module | None = None,
) -> None:
    """Write an mlx-lm model directory; MTP weights go to mtp.safetensors as `mtp.*` keys.

    tokenizer None writes weights and config only (the caller copies the tokenizer files).
    """
    out.mkdir(parents=True, exist_ok=True)
    if mtp is not None:
        # train/mtp_chain.py feeds the head pre-final-norm hiddens and chains its pre-`mtp.norm`
        # output; checkpoints without this key are read as Qwen3.5's post-norm convention.
        config = {**config, "specfleet_mtp_hidden": "pre_norm"}
    mx.save_safetensors(str(out / "model.safetensors"), _fp16(model), metadata=META)
    if mtp is not None:
        save_mtp(out, mtp)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if tokenizer is None:
        return
    tokenizer.save(str(out / "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS,
        "bos_token": None,
        "unk_token": None,
        "pad_token": EOS,
        "add_bos_token": False,
        "model_max_length": config["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": EOS, "pad_token": EOS}, indent=2) + "\n"
    )
