"""config.json for mlx-lm from a GGUF's `{arch}.*` metadata (llama, qwen2, qwen3)."""

from __future__ import annotations

from typing import Any

FAMILIES = ("llama", "qwen2", "qwen3")


def _need(meta: dict[str, Any], key: str) -> Any:
    if key not in meta:
        raise ValueError(f"the GGUF has no {key!r} metadata: it is needed to build config.json")
    return meta[key]


def _rope_scaling(meta: dict[str, Any], arch: str) -> dict[str, Any] | None:
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    factor = meta.get(f"{arch}.rope.scaling.factor")
    if kind in ("none", None) or factor in (None, 1.0):
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(factor)}
    if kind == "yarn":
        original = _need(meta, f"{arch}.rope.scaling.original_context_length")
        return {
            "type": "yarn",
            "factor": float(factor),
            "original_max_position_embeddings": int(original),
        }
    raise ValueError(
        f"{arch}.rope.scaling.type={kind!r} is not supported: convert a GGUF with no, linear or "
        "yarn RoPE scaling"
    )


def build_config(meta: dict[str, Any], tensor_names: set[str], vocab_rows: int) -> dict[str, Any]:
    """The mlx-lm config for this GGUF. tensor_names: the GGUF's tensor names (tied embeddings
    and attention biases show there, not in the metadata); vocab_rows: token_embd's rows."""
    arch = _need(meta, "general.architecture")
    if arch not in FAMILIES:
        raise ValueError(
            f"general.architecture={arch!r} is not supported: convert one of {list(FAMILIES)}"
        )
    if "rope_freqs.weight" in tensor_names:
        raise ValueError(
            "the GGUF holds rope_freqs.weight (Llama 3.1-style RoPE frequency scaling), which "
            "this converter does not map yet: convert a model without it"
        )
    heads = int(_need(meta, f"{arch}.attention.head_count"))
    hidden = int(_need(meta, f"{arch}.embedding_length"))
    head_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // heads)
    config: dict[str, Any] = {
        "model_type": arch,
        "architectures": [
            {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(arch, "Qwen3ForCausalLM")
        ],
        "hidden_size": hidden,
        "num_hidden_layers": int(_need(meta, f"{arch}.block_count")),
        "intermediate_size": int(_need(meta, f"{arch}.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv") or heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(_need(meta, f"{arch}.attention.layer_norm_rms_epsilon")),
        "vocab_size": vocab_rows,
        "max_position_embeddings": int(meta.get(f"{arch}.context_length") or 4096),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base") or 10000.0),
        "rope_scaling": _rope_scaling(meta, arch),
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        config["mlp_bias"] = "blk.0.ffn_up.bias" in tensor_names
    for name in ("bos", "eos"):
        tid = meta.get(f"tokenizer.ggml.{name}_token_id")
        if tid is not None:
            config[f"{name}_token_id"] = int(tid)
    return config
