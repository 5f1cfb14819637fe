"""ggml blocks -> MLX affine weights: mx.dequantize of the result equals gguf's reference
dequantizer bit for bit, for every kept format; scales that would round are refused."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from workers.convert.ggml_blocks import EXACT_FORMATS, K_FORMATS, affine_from_ggml, pack_codes

ROWS, COLS = 24, 512


def ggml_tensor(qtype: QT, seed: int = 0) -> np.ndarray:
    """[ROWS, row_bytes] uint8. gguf quantizes the legacy formats from floats; it writes no
    K-quants, so those are random blocks with sane fp16 super-scales (any bits are valid)."""
    rng = np.random.default_rng(seed)
    if qtype not in K_FORMATS:
        return quants.quantize(rng.normal(size=(ROWS, COLS)).astype(np.float32), qtype)
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, size=(ROWS * COLS // 256, block_bytes), dtype=np.uint8)
    d_dmin = rng.uniform(1e-3, 2e-2, size=(len(blocks), 2)).astype(np.float16)
    blocks[:, :4] = d_dmin.view(np.uint8)
    return blocks.reshape(ROWS, -1)


def dequantized(a) -> np.ndarray:
    f32 = mx.float32
    w = mx.dequantize(
        mx.array(a.weight),
        mx.array(a.scales).astype(f32),
        mx.array(a.biases).astype(f32),
        32,
        a.bits,
    )
    return np.array(w)


@pytest.mark.parametrize("qtype", list(EXACT_FORMATS), ids=lambda q: q.name)
def test_bit_exact_against_gguf(qtype):
    raw = ggml_tensor(qtype)
    want = quants.dequantize(raw, qtype)  # [ROWS, COLS] float32, what llama.cpp computes
    dtypes = [np.float32] if qtype in K_FORMATS else [np.float16, np.float32]
    for dtype in dtypes:
        a = affine_from_ggml(raw, qtype, dtype)
        assert a.bits == EXACT_FORMATS[qtype] and a.scales.dtype == dtype
        assert a.weight.shape == (ROWS, COLS * a.bits // 32) and a.scales.shape == (
            ROWS,
            COLS // 32,
        )
        assert np.array_equal(dequantized(a), want), f"{qtype.name} in {dtype.__name__}"


@pytest.mark.parametrize("qtype", K_FORMATS, ids=lambda q: q.name)
def test_k_quant_scales_are_refused_in_fp16(qtype):
    with pytest.raises(ValueError, match=f"{qtype.name} scales do not fit float16 exactly"):
        affine_from_ggml(ggml_tensor(qtype), qtype, np.float16)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_pack_codes_is_mlx_packing(bits):
    codes = np.random.default_rng(bits).integers(0, 2**bits, size=(5, 64), dtype=np.uint8)
    packed = mx.array(pack_codes(codes, bits))
    ones, zeros = mx.ones((5, 2)), mx.zeros((5, 2))
    assert np.array_equal(np.array(mx.dequantize(packed, ones, zeros, 32, bits)), codes)
