"""GGUF file -> mlx-lm model directory (config.json, model*.safetensors, tokenizer files).

    convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-mlx")

Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 tensors stay quantized, bit-exact, and so do Q4_K / Q5_K when
dtype is float32 (workers/convert/ggml_blocks.py gives the mapping); other formats are
dequantized to `dtype`. The result loads with
`mlx_lm.load`, `Engine.load` and `specfleet worker/up --model`; on the CPU, Engine.load then
dequantizes it again to fp32 unless asked to keep it quantized (workers/loading.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workers.convert.gguf_config import FAMILIES, build_config
from workers.convert.gguf_tensors import ConvertedTensors, convert_tensors
from workers.convert.gguf_tokenizer import tokenizer_files

log = logging.getLogger(__name__)

DTYPES = {"float16": np.float16, "float32": np.float32}


@dataclass
class ConvertReport:
    out_dir: Path
    model_type: str
    formats: dict[str, int]  # "Q4_1 kept (4-bit, group 32)": 210, "F32 float": 61, ...
    quantized_modules: int
    num_parameters: int  # logical weights (codes count once, not per packed word)


def read_metadata(reader: Any) -> dict[str, Any]:
    """key -> Python value for every GGUF metadata field (arrays as lists)."""
    meta: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        meta[key] = f.contents()
    return meta


def _quantization_config(quantized: dict[str, int]) -> dict[str, Any] | None:
    """mlx-lm's `quantization` entry: the most common bits, plus per-module overrides."""
    if not quantized:
        return None
    bits = max(set(quantized.values()), key=list(quantized.values()).count)
    config: dict[str, Any] = {"group_size": 32, "bits": bits, "mode": "affine"}
    for module, b in sorted(quantized.items()):
        if b != bits:
            config[module] = {"group_size": 32, "bits": b, "mode": "affine"}
    return config


def _save_weights(out: Path, weights: dict[str, np.ndarray]) -> None:
    """mlx-lm's shard layout (utils.make_shards + model.safetensors.index.json)."""
    import mlx.core as mx
    from mlx_lm.utils import make_shards

    arrays = {k: mx.array(v) for k, v in sorted(weights.items())}
    shards = make_shards(arrays)
    fmt = "model-{:05d}-of-{:05d}.safetensors" if len(shards) > 1 else "model.safetensors"
    index: dict[str, Any] = {
        "metadata": {"total_size": sum(v.nbytes for v in arrays.values())},
        "weight_map": {},
    }
    for i, shard in enumerate(shards):
        name = fmt.format(i + 1, len(shards))
        mx.save_safetensors(str(out / name), shard, metadata={"format": "mlx"})
        index["weight_map"].update({k: name for k in shard})
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _num_parameters(conv: ConvertedTensors) -> int:
    total = 0
    for name, v in conv.weights.items():
        module, leaf = name.rsplit(".", 1)
        if leaf in ("scales", "biases") and module in conv.quantized:
            continue
        bits = conv.quantized.get(module) if leaf == "weight" else None
        total += v.size * 32 // bits if bits else v.size
    return total


def convert_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    *,
    dtype: str = "float16",
    keep_quantized: bool = True,
    overwrite: bool = False,
) -> ConvertReport:
    """Write an mlx-lm model directory for a llama / qwen2 / qwen3 GGUF file.

    dtype: 'float16' or 'float32', for float and dequantized tensors and for the kept formats'
    scales (K-quant scales are exact in fp32 only). keep_quantized=False dequantizes all."""
    from gguf import GGUFReader
    from mlx_lm.utils import load_model, save_config

    src, out = Path(gguf_path), Path(out_dir)
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported: use one of {sorted(DTYPES)}")
    if not src.is_file():
        raise ValueError(f"gguf_path={str(src)!r} is not a file: pass a .gguf model file")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(
            f"out_dir={str(out)!r} exists and is not empty: pass an empty or new directory "
            "(or overwrite=True / --force)"
        )
    try:
        reader = GGUFReader(src)
    except (ValueError, OSError) as e:
        raise ValueError(f"gguf_path={str(src)!r} is not a readable GGUF file: {e}") from e
    meta = read_metadata(reader)
    arch = meta.get("general.architecture")
    if arch not in FAMILIES:
        raise ValueError(
            f"general.architecture={arch!r} is not supported: convert one of {list(FAMILIES)}"
        )
    names = {t.name for t in reader.tensors}
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ValueError(f"{src} has no token_embd.weight tensor: not a llama/qwen2/qwen3 model")
    rope = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    rope_freqs = np.asarray(rope.data, np.float32) if rope is not None else None
    config = build_config(meta, names, int(embed.shape[1]), rope_freqs)
    tensors = [t for t in reader.tensors if t is not rope]  # now in config.json's rope_scaling
    conv = convert_tensors(tensors, meta, DTYPES[dtype], keep_quantized)
    quantization = _quantization_config(conv.quantized)
    if quantization is not None:
        config["quantization"] = quantization
    config["torch_dtype"] = dtype
    tok_files = tokenizer_files(meta, config["max_position_embeddings"])
    out.mkdir(parents=True, exist_ok=True)  # everything that can fail on bad input has run
    _save_weights(out, conv.weights)
    save_config(config, out / "config.json")
    for name, text in tok_files.items():
        (out / name).write_text(text)
    load_model(out, lazy=True)  # strict: every weight name and shape matches the architecture
    report = ConvertReport(
        out_dir=out,
        model_type=config["model_type"],
        formats=dict(conv.formats),
        quantized_modules=len(conv.quantized),
        num_parameters=_num_parameters(conv),
    )
    log.info("converted %s -> %s: %s", src, out, report.formats)
    return report
