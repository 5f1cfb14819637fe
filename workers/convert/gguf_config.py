"""config.json for mlx-lm from a GGUF's `{arch}.*` metadata (llama, qwen2, qwen3)."""

from __future__ import annotations

from typing import Any

import numpy as np

FAMILIES = ("llama", "qwen2", "qwen3")
# Llama 3.x RoPE scaling settings to try against a file's rope_freqs (the converter stores only
# the resulting per-frequency factors): original context, low- and high-frequency factors.
_LLAMA3_GRID = [(n, lo, hi) for n in (8192, 4096, 16384, 32768, 131072, 2048)
                for lo in (1.0, 2.0) for hi in (4.0, 2.0, 8.0)]  # fmt: skip


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


def llama3_rope_factors(
    base: float, dims: int, factor: float, low: float, high: float, original: int
) -> np.ndarray:
    """Per-frequency divisors [dims / 2] of Llama 3.1 RoPE scaling (what llama.cpp stores as
    rope_freqs.weight; mlx-lm's Llama3RoPE applies the same rule)."""
    wavelen = 2 * np.pi * base ** (np.arange(0, dims, 2) / dims)
    smooth = (original / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < original / high, 1.0, np.where(wavelen > original / low, factor, mid))


def _llama3_scaling(rope_freqs: np.ndarray, base: float, dims: int) -> dict[str, Any]:
    factor = float(rope_freqs.max())
    for original, low, high in _LLAMA3_GRID:
        want = llama3_rope_factors(base, dims, factor, low, high, original)
        if want.shape == rope_freqs.shape and np.allclose(want, rope_freqs, rtol=1e-5):
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    raise ValueError(
        "rope_freqs.weight does not match Llama 3.1 RoPE scaling for any known setting: "
        "this converter cannot express it in config.json"
    )


def build_config(
    meta: dict[str, Any],
    tensor_names: set[str],
    vocab_rows: int,
    rope_freqs: np.ndarray | None = None,
) -> dict[str, Any]:
    """The mlx-lm config for this GGUF. tensor_names: the GGUF's tensor names (tied embeddings
    and attention biases show there, not in the metadata); vocab_rows: token_embd's rows;
    rope_freqs: the rope_freqs.weight tensor when the file has one (Llama 3.1+)."""
    arch = _need(meta, "general.architecture")
    if arch not in FAMILIES:
        raise ValueError(
            f"general.architecture={arch!r} is not supported: convert one of {list(FAMILIES)}"
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
    if rope_freqs is not None:
        dims = int(meta.get(f"{arch}.rope.dimension_count") or head_dim)
        config["rope_scaling"] = _llama3_scaling(rope_freqs, config["rope_theta"], dims)
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        config["mlp_bias"] = "blk.0.ffn_up.bias" in tensor_names
    if (bos := meta.get("tokenizer.ggml.bos_token_id")) is not None:
        config["bos_token_id"] = int(bos)
    # Generation ends at EOS and, where the file names them, end-of-turn / end-of-message
    # tokens (Llama 3's <|eot_id|> / <|eom_id|>), as llama.cpp's end-of-generation set does.
    stops = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    stop_ids = list(dict.fromkeys(int(t) for t in stops if t is not None))
    if stop_ids:
        config["eos_token_id"] = stop_ids[0] if len(stop_ids) == 1 else stop_ids
    return config
