"""GGUF tensors -> mlx-lm weight names and arrays (kept quantized where exact, else float).

llama.cpp names tensors `blk.{i}.attn_q.weight`, `token_embd.weight`, ...; mlx-lm (like HF) uses
`model.layers.{i}.self_attn.q_proj.weight`, ... Numpy shapes agree ([out, in]); GGUF lists its
dims reversed. For the llama family llama.cpp's converter permutes the rows of attn_q / attn_k
from HF's rotate-half RoPE layout to its interleaved one (convert_hf_to_gguf.py,
LlamaModel.permute); `unpermute_rows` undoes it. Rows are whole in every ggml format (blocks run
along a row), so the permutation applies to the raw quantized bytes before anything else.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

from workers.convert.ggml_blocks import EXACT_FORMATS, GROUP_SIZE, K_FORMATS, affine_from_ggml

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_FLOAT = (QT.F32, QT.F16, QT.BF16)


def mlx_name(gguf_name: str) -> str:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight'."""
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _BLOCK:
        return f"model.layers.{parts[1]}.{_BLOCK[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP:
        return f"{_TOP[parts[0]]}.{parts[1]}"
    raise ValueError(
        f"GGUF tensor {gguf_name!r} has no mlx-lm counterpart in the llama/qwen2/qwen3 layout: "
        "is the file one of those families?"
    )


def unpermute_rows(x: np.ndarray, n_head: int) -> np.ndarray:
    """Invert llama.cpp's permute: rows [n_head, head_dim/2, 2] -> [n_head, 2, head_dim/2]."""
    rows = x.shape[0]
    return x.reshape(n_head, rows // n_head // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


@dataclass
class ConvertedTensors:
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # mlx-lm name -> array
    quantized: dict[str, int] = field(default_factory=dict)  # module path -> bits
    formats: Counter[str] = field(default_factory=Counter)  # "Q4_1 kept", "Q6_K dequantized"


def convert_tensors(
    tensors: list[Any], meta: dict[str, Any], dtype: Any, keep_quantized: bool
) -> ConvertedTensors:
    """tensors: gguf.GGUFReader.tensors; dtype: np.float16 | np.float32 for float outputs."""
    arch = meta["general.architecture"]
    heads = int(meta[f"{arch}.attention.head_count"])
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv") or heads)
    out = ConvertedTensors()
    for t in tensors:
        name, qtype = mlx_name(t.name), QT(t.tensor_type)
        raw = np.asarray(t.data)
        part = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        if arch == "llama" and part in ("attn_q", "attn_k"):
            raw = unpermute_rows(raw, heads if part == "attn_q" else kv_heads)
        if qtype in _FLOAT:
            out.weights[name] = quants.dequantize(raw, qtype).astype(dtype, copy=False)
            out.formats[f"{qtype.name} float"] += 1
        elif (
            keep_quantized
            and qtype in EXACT_FORMATS
            and raw.ndim == 2
            and (
                qtype not in K_FORMATS or dtype == np.float32  # K scales are exact in fp32 only
            )
        ):
            a = affine_from_ggml(raw, qtype, dtype)
            module = name.rsplit(".", 1)[0]
            out.weights[name] = a.weight
            out.weights[f"{module}.scales"] = a.scales
            out.weights[f"{module}.biases"] = a.biases
            out.quantized[module] = a.bits
            out.formats[f"{qtype.name} kept ({a.bits}-bit, group {GROUP_SIZE})"] += 1
        else:
            try:
                values = quants.dequantize(raw, qtype)
            except NotImplementedError as e:
                raise ValueError(
                    f"tensor {t.name!r} is {qtype.name}, which the gguf package cannot "
                    "dequantize: convert from a GGUF in another quantization"
                ) from e
            out.weights[name] = values.astype(dtype, copy=False)
            out.formats[f"{qtype.name} dequantized"] += 1
    return out
