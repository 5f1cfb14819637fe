"""llama.cpp's block-quantized tensors as MLX affine quantized weights, bit for bit.

MLX's affine quantization stores, per group of `group_size` consecutive inputs of a row, a scale
s and a bias b, and unsigned `bits`-wide codes q packed little-endian into uint32 words; a weight
is w = s * q + b. The ggml formats below are that same thing with 32-element groups, so they map
without re-quantizing (d and m are the block's fp16 fields, q its unsigned codes):

| ggml | block (bytes)              | value           | MLX bits | scale | bias   |
|------|----------------------------|-----------------|----------|-------|--------|
| Q8_0 | d, 32 x int8 (34)          | d * i8          | 8        | d     | -128 d |
| Q4_0 | d, 16 x 2 nibbles (18)     | d * (q - 8)     | 4        | d     | -8 d   |
| Q4_1 | d, m, 16 x 2 nibbles (20)  | d * q + m       | 4        | d     | m      |
| Q5_0 | d, 32 high bits, nibbles   | d * (q - 16)    | 5        | d     | -16 d  |
| Q5_1 | d, m, 32 high bits, nibbles| d * q + m       | 5        | d     | m      |

(Q8_0's int8 i8 becomes the code q = i8 + 128.) d, m and -2^k d are exact in fp16 and fp32 (a
power-of-two multiple of an fp16 value), so with fp16 or fp32 scales `mx.dequantize` computed
in fp32 reproduces llama.cpp's dequantized values exactly; `affine_from_ggml` checks that the
biases it stores are exact. The K-quants (Q2_K..Q6_K) keep 6-bit sub-block scales multiplied
by an fp16 super-scale, which needs fp32 scales (or 16-element groups, which MLX lacks) to stay
exact; they and the IQ formats are dequantized by the caller instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT

GROUP_SIZE = 32

# qtype -> (bits, bias as a multiple of d, or None when the block stores its own minimum m)
EXACT_FORMATS: dict[QT, tuple[int, int | None]] = {
    QT.Q8_0: (8, -128),
    QT.Q4_0: (4, -8),
    QT.Q4_1: (4, None),
    QT.Q5_0: (5, -16),
    QT.Q5_1: (5, None),
}


@dataclass
class Affine:
    """One MLX affine-quantized matrix (numpy, ready for mx.array)."""

    weight: np.ndarray  # [rows, cols * bits / 32] uint32
    scales: np.ndarray  # [rows, cols / 32] in the requested float dtype
    biases: np.ndarray  # [rows, cols / 32]
    bits: int
    group_size: int = GROUP_SIZE


def _codes_and_fields(blocks: np.ndarray, qtype: QT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """blocks [n, block_bytes] uint8 -> (codes [n, 32] uint8, d [n] f32, m [n] f32 or empty)."""
    f16 = blocks[:, :2].copy().view(np.float16)[:, 0].astype(np.float32)
    empty = np.zeros(0, np.float32)
    if qtype == QT.Q8_0:
        return blocks[:, 2:] ^ np.uint8(0x80), f16, empty  # int8 two's complement + 128
    if qtype in (QT.Q4_0, QT.Q5_0):
        m, rest = empty, blocks[:, 2:]
    else:
        m, rest = blocks[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32), blocks[:, 4:]
    if qtype in (QT.Q5_0, QT.Q5_1):
        high, rest = np.unpackbits(rest[:, :4], axis=-1, bitorder="little"), rest[:, 4:]
    else:
        high = None
    # Nibbles: byte j holds element j (low) and element j + 16 (high).
    codes = np.concatenate([rest & np.uint8(0x0F), rest >> np.uint8(4)], axis=-1)
    if high is not None:
        codes |= high << np.uint8(4)
    return codes, f16, m


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """codes [rows, cols] (< 2**bits) -> MLX's packing: a little-endian bit stream per row,
    read as uint32 words [rows, cols * bits / 32]."""
    rows, cols = codes.shape
    if bits == 8:
        packed = np.ascontiguousarray(codes, dtype=np.uint8)
    elif bits == 4:
        packed = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))
    else:
        stream = np.unpackbits(codes[..., None], axis=-1, count=bits, bitorder="little")
        packed = np.packbits(stream.reshape(rows, cols * bits), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view(np.uint32)


def affine_from_ggml(raw: np.ndarray, qtype: QT, dtype: np.dtype) -> Affine:
    """raw [rows, row_bytes] uint8 (as gguf's reader gives it) -> the exact MLX affine form.

    dtype: np.float16 or np.float32, the dtype of the scales and biases."""
    bits, bias_mult = EXACT_FORMATS[qtype]
    rows = raw.shape[0]
    block_bytes = _block_bytes(qtype)
    blocks = raw.reshape(-1, block_bytes)
    codes, d, m = _codes_and_fields(blocks, qtype)
    bias32 = d * np.float32(bias_mult) if bias_mult is not None else m
    scales, biases = d.astype(dtype), bias32.astype(dtype)
    if not (
        np.array_equal(scales.astype(np.float32), d, equal_nan=True)
        and np.array_equal(biases.astype(np.float32), bias32, equal_nan=True)
    ):
        raise ValueError(f"{qtype.name} scales do not fit {np.dtype(dtype).name} exactly")
    return Affine(
        weight=pack_codes(codes.reshape(rows, -1), bits),
        scales=scales.reshape(rows, -1),
        biases=biases.reshape(rows, -1),
        bits=bits,
    )


def _block_bytes(qtype: QT) -> int:
    from gguf import GGML_QUANT_SIZES

    return int(GGML_QUANT_SIZES[qtype][1])
