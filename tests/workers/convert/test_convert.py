"""GGUF -> mlx-lm conversion of small llama / qwen2 / qwen3 files written in code, compared with
the float model each came from.

Exact (bit for bit): the float formats, and every kept format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
against the values llama.cpp computes from the file (gguf's dequantize), so the converted model,
dequantized on the CPU, gives bit-identical logits to a float model holding those values.
Stated tolerances: the kept-quantized model's own quantized matmuls (a different summation
order) within 1e-4 of those logits, relative to their max; each format's values against the
original float weights within its quantization step (relative RMS error bounds below).
"""

from __future__ import annotations

import copy

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from mlx.utils import tree_flatten
from mlx_lm import load

from tests.workers.convert.gguf_files import hf_tokenizer, tiny_family_model, write_gguf
from workers.convert.from_gguf import convert_gguf
from workers.loading import dequantize_layers, quantized_layers

# Relative RMS error of each format against the float weights (quantization step / sqrt(12)
# with margin): what "close to the float model" means per format.
REL_RMS = {QT.F32: 0.0, QT.F16: 1e-3, QT.BF16: 1e-2, QT.Q8_0: 0.01, QT.Q5_0: 0.05}
REL_RMS.update({QT.Q5_1: 0.05, QT.Q4_0: 0.1, QT.Q4_1: 0.1})
KEPT_BITS = {QT.Q8_0: 8, QT.Q5_0: 5, QT.Q5_1: 5, QT.Q4_0: 4, QT.Q4_1: 4}
FAMILIES = [("llama", "smollm"), ("qwen2", "qwen2"), ("qwen3", "llama-bpe")]
PROMPT = mx.array([[5, 17, 300, 42, 7, 99, 256, 3]])


@pytest.fixture(scope="module", params=FAMILIES, ids=[f for f, _ in FAMILIES])
def family(request):
    arch, pre = request.param
    return arch, pre, tiny_family_model(arch), hf_tokenizer(pre)


def _convert(tmp_path, family, qtype, **kw):
    arch, pre, model, tok = family
    expected = write_gguf(tmp_path / "m.gguf", model, arch, qtype, tok, pre)
    report = convert_gguf(tmp_path / "m.gguf", tmp_path / "out", **kw)
    return expected, report


def _with_weights(model, weights: dict[str, np.ndarray]):
    ref = copy.deepcopy(model)
    ref.load_weights([(k, mx.array(v)) for k, v in weights.items()])
    return ref


@pytest.mark.parametrize("qtype", [QT.F32, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1])
def test_weights_exact_and_logits_match_the_float_model(tmp_path, family, qtype):
    arch, _, model, _ = family
    expected, report = _convert(tmp_path, family, qtype, dtype="float32")
    converted, _ = load(str(tmp_path / "out"))
    assert converted.args.model_type == arch
    kept = quantized_layers(converted)
    if qtype in KEPT_BITS:
        assert kept and all(m.bits == KEPT_BITS[qtype] and m.group_size == 32 for _, m in kept)
        assert report.formats[f"{qtype.name} kept ({KEPT_BITS[qtype]}-bit, group 32)"] == len(kept)
    else:
        assert not kept
    quantized_logits = converted(PROMPT)
    assert dequantize_layers(converted) == len(kept)
    got = dict(tree_flatten(converted.parameters()))
    assert sorted(got) == sorted(expected)
    for name, values in expected.items():
        assert np.array_equal(np.array(got[name]), values), f"{name} differs from the file"
    reference = _with_weights(model, expected)(PROMPT)  # [1, L, V]
    assert mx.array_equal(converted(PROMPT), reference)  # bit for bit
    scale = float(mx.abs(reference).max())
    assert float(mx.abs(quantized_logits - reference).max()) <= 1e-4 * scale
    for name, w in tree_flatten(model.parameters()):
        w = np.array(w)
        rel = np.sqrt(np.mean((expected[name] - w) ** 2) / np.mean(w**2))
        limit = REL_RMS[qtype] if w.ndim == 2 else 0.0  # 1-D tensors are written F32
        assert rel <= limit, f"{qtype.name} {name}: relative RMS error {rel:.4f} > {limit}"
    if qtype == QT.F32:  # the float round trip is the original model itself
        assert mx.array_equal(converted(PROMPT), model(PROMPT))


def test_float16_output_keeps_fp16_scales_exact(tmp_path, family):
    expected, _ = _convert(tmp_path, family, QT.Q4_1, dtype="float16")
    converted, _ = load(str(tmp_path / "out"))
    layers = quantized_layers(converted)
    assert {m.scales.dtype for _, m in layers} == {mx.float16}
    dequantize_layers(converted)
    got = dict(tree_flatten(converted.parameters()))
    for name, values in expected.items():
        if values.ndim == 2:
            assert np.array_equal(np.array(got[name]), values), name


def test_dequantize_option_and_other_formats_are_dequantized(tmp_path, family):
    """--dequantize writes plain float layers; BF16 (not a kept format) is widened exactly."""
    expected, report = _convert(tmp_path, family, QT.Q8_0, dtype="float32", keep_quantized=False)
    converted, _ = load(str(tmp_path / "out"))
    assert not quantized_layers(converted) and report.formats["Q8_0 dequantized"] > 0
    got = dict(tree_flatten(converted.parameters()))
    assert all(np.array_equal(np.array(got[k]), v) for k, v in expected.items())
    (tmp_path / "bf16").mkdir()
    expected, _ = _convert(tmp_path / "bf16", family, QT.BF16, dtype="float32")
    converted, _ = load(str(tmp_path / "bf16" / "out"))
    got = dict(tree_flatten(converted.parameters()))
    assert all(np.array_equal(np.array(got[k]), v) for k, v in expected.items())


def test_k_quants_kept_in_fp32_else_dequantized_exactly(tmp_path):
    """Q4_K stays quantized when the scales are fp32 (exact) and is dequantized in fp16; Q6_K
    (16-element groups) is always dequantized; every path gives gguf's reference values."""
    from gguf import GGUFReader, quants

    from tests.workers.convert.test_ggml_blocks import ggml_tensor
    from workers.convert.from_gguf import read_metadata
    from workers.convert.gguf_tensors import convert_tensors

    write_gguf(tmp_path / "m.gguf", tiny_family_model("qwen3"), "qwen3", QT.F32,
               hf_tokenizer("qwen2"), "qwen2")  # fmt: skip
    meta = read_metadata(GGUFReader(tmp_path / "m.gguf"))

    class Tensor:  # the reader's tensor interface
        def __init__(self, qtype: QT) -> None:
            self.name, self.tensor_type = "blk.0.ffn_down.weight", qtype
            self.data = ggml_tensor(qtype) if qtype == QT.Q4_K else _q6_k()

    name = "model.layers.0.mlp.down_proj"
    for qtype, dtype, kept in [(QT.Q4_K, np.float32, True), (QT.Q4_K, np.float16, False),
                               (QT.Q6_K, np.float32, False)]:  # fmt: skip
        t = Tensor(qtype)
        conv = convert_tensors([t], meta, dtype, keep_quantized=True)
        want = quants.dequantize(t.data, qtype)
        if kept:
            assert conv.quantized == {name: 4}
            a = {k.rsplit(".", 1)[1]: mx.array(v) for k, v in conv.weights.items()}
            got = np.array(mx.dequantize(a["weight"], a["scales"], a["biases"], 32, 4))
        else:
            assert conv.formats == {f"{qtype.name} dequantized": 1}
            got = conv.weights[f"{name}.weight"].astype(np.float32)
            want = want.astype(dtype).astype(np.float32)  # fp16 output rounds, as stated
        assert np.array_equal(got, want), (qtype.name, dtype)


def _q6_k() -> np.ndarray:
    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, size=(24 * 2, 210), dtype=np.uint8)  # 24 rows x 512
    blocks[:, -2:] = rng.uniform(1e-3, 2e-2, size=(48, 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(24, -1)


def test_llama3_rope_scaling_from_rope_freqs(tmp_path):
    """Llama 3.1+ files carry RoPE scaling only as rope_freqs.weight; config.json gets the
    llama3 rope_scaling that reproduces it, and the logits equal the original model's."""
    from mlx_lm.models import llama

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    args = vars(tiny_family_model("llama").args) | {"rope_scaling": scaling, "head_dim": 16}
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs(**args))
    mx.eval(model.parameters())
    write_gguf(tmp_path / "m.gguf", model, "llama", QT.F32, hf_tokenizer("llama-bpe"), "llama-bpe")
    convert_gguf(tmp_path / "m.gguf", tmp_path / "out", dtype="float32")
    converted, _ = load(str(tmp_path / "out"))
    assert converted.args.rope_scaling == scaling
    long = mx.array([list(range(1, 200))])  # positions past the high-frequency wavelengths
    assert mx.array_equal(converted(long), model(long))


def test_config_stops_at_eos_and_end_of_turn_and_names_bad_metadata():
    from workers.convert.gguf_config import build_config

    meta = {
        "general.architecture": "llama",
        "llama.attention.head_count": 4,
        "llama.embedding_length": 64,
        "llama.block_count": 2,
        "llama.feed_forward_length": 128,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.eot_token_id": 9,
    }
    config = build_config(meta, {"token_embd.weight"}, 512)
    assert config["eos_token_id"] == [2, 9] and config["bos_token_id"] == 1
    assert config["tie_word_embeddings"] and config["num_key_value_heads"] == 4
    assert build_config(meta | {"tokenizer.ggml.eot_token_id": 2}, set(), 512)["eos_token_id"] == 2
    with pytest.raises(ValueError, match="'llama.block_count'"):
        build_config({k: v for k, v in meta.items() if k != "llama.block_count"}, set(), 512)
    with pytest.raises(ValueError, match="llama.rope.scaling.type='longrope'"):
        build_config(meta | {"llama.rope.scaling.type": "longrope",
                             "llama.rope.scaling.factor": 4.0}, set(), 512)  # fmt: skip
