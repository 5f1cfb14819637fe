"""llama.cpp's block-quantized tensors as MLX affine quantized weights, bit for bit.

MLX's affine quantization stores, per group of `group_size` consecutive inputs of a row, a scale
s and a bias b, and unsigned `bits`-wide codes q packed little-endian into uint32 words; a weight
is w = s * q + b. The ggml formats below are that same thing with 32-element groups, so they map
without re-quantizing (d and m are the block's fp16 fields, q its unsigned codes):

| ggml | block (bytes)                 | value           | bits | scale     | bias       |
|------|-------------------------------|-----------------|------|-----------|------------|
| Q8_0 | d, 32 x int8 (34)             | d * i8          | 8    | d         | -128 d     |
| Q4_0 | d, 16 x 2 nibbles (18)        | d * (q - 8)     | 4    | d         | -8 d       |
| Q4_1 | d, m, 16 x 2 nibbles (20)     | d * q + m       | 4    | d         | m          |
| Q5_0 | d, 32 high bits, nibbles (22) | d * (q - 16)    | 5    | d         | -16 d      |
| Q5_1 | d, m, high bits, nibbles (24) | d * q + m       | 5    | d         | m          |
| Q4_K | 256: d, dmin, 8 x 6-bit (s,n) | d s q - dmin n  | 4    | d * s     | -dmin * n  |
| Q5_K | Q4_K + 256 high bits          | d s q - dmin n  | 5    | d * s     | -dmin * n  |

(Q8_0's int8 i8 becomes the code q = i8 + 128; a K super-block of 256 is eight MLX groups of 32,
each with its 6-bit sub-scale s and sub-min n.) d, m and -2^k d are exact in fp16 and fp32 (a
power-of-two multiple of an fp16 value), so with fp16 or fp32 scales `mx.dequantize` computed
in fp32 reproduces llama.cpp's values exactly. d * s (11 + 6 significant bits) is exact only in
fp32, so Q4_K / Q5_K stay quantized only for fp32 scales; `affine_from_ggml` checks every scale
and bias it stores. Q2_K, Q3_K and Q6_K use 16-element groups (MLX's smallest is 32) and the IQ
formats a codebook: the caller dequantizes those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT

GROUP_SIZE = 32

# qtype -> MLX bits; K_FORMATS need fp32 scales to stay exact
EXACT_FORMATS: dict[QT, int] = {
    QT.Q8_0: 8,
    QT.Q4_0: 4,
    QT.Q4_1: 4,
    QT.Q5_0: 5,
    QT.Q5_1: 5,
    QT.Q4_K: 4,
    QT.Q5_K: 5,
}
K_FORMATS = (QT.Q4_K, QT.Q5_K)


@dataclass
class Affine:
    """One MLX affine-quantized matrix (numpy, ready for mx.array)."""

    weight: np.ndarray  # [rows, cols * bits / 32] uint32
    scales: np.ndarray  # [rows, cols / 32] in the requested float dtype
    biases: np.ndarray  # [rows, cols / 32]
    bits: int
    group_size: int = GROUP_SIZE


def _f16(b: np.ndarray) -> np.ndarray:
    """[n, 2] uint8 -> [n] float32 (an fp16 field of each block)."""
    return b.copy().view(np.float16)[:, 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16 * c] bytes -> [n, 32 * c] codes: in each 16-byte (legacy) or 32-byte (K) chunk,
    byte j holds element j (low nibble) and element j + chunk (high nibble)."""
    n, width = qs.shape
    chunk = 16 if width == 16 else 32
    qs = qs.reshape(n, -1, 1, chunk)
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=2).reshape(n, -1)


def _groups(blocks: np.ndarray, qtype: QT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """blocks [n, block_bytes] uint8 -> per 32-element group: codes [g, 32] uint8, scale [g]
    and bias [g] in float32, such that value = scale * code + bias exactly."""
    if qtype == QT.Q8_0:  # d, int8 x 32; code = int8 + 128 (two's complement, top bit flipped)
        d = _f16(blocks[:, :2])
        return blocks[:, 2:] ^ np.uint8(0x80), d, d * np.float32(-128)
    if qtype in (QT.Q4_0, QT.Q5_0):
        d, m, rest = _f16(blocks[:, :2]), None, blocks[:, 2:]
    elif qtype in (QT.Q4_1, QT.Q5_1):
        d, m, rest = _f16(blocks[:, :2]), _f16(blocks[:, 2:4]), blocks[:, 4:]
    else:  # K: d, dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32
        from gguf.quants import Q4_K

        sc, mins = Q4_K.get_scale_min(blocks[:, 4:16])  # [n, 8] each
        d = (_f16(blocks[:, :2])[:, None] * sc.astype(np.float32)).reshape(-1)
        m = -(_f16(blocks[:, 2:4])[:, None] * mins.astype(np.float32)).reshape(-1)
        if qtype == QT.Q4_K:
            return _nibbles(blocks[:, 16:]).reshape(-1, 32), d, m
        high = blocks[:, 16:48]  # bit i of byte j: high bit of element j of sub-block i
        bits = (high[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & np.uint8(1)
        codes = _nibbles(blocks[:, 48:]).reshape(-1, 8, 32) | (bits << np.uint8(4))
        return codes.reshape(-1, 32), d, m
    codes = _nibbles(rest[:, 4:] if qtype in (QT.Q5_0, QT.Q5_1) else rest)
    if qtype in (QT.Q5_0, QT.Q5_1):  # 32 high bits, bit j for element j
        codes |= np.unpackbits(rest[:, :4], axis=-1, bitorder="little") << np.uint8(4)
    bias = m if m is not None else d * np.float32(-8 if qtype == QT.Q4_0 else -16)
    return codes, d, bias


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


def affine_from_ggml(raw: np.ndarray, qtype: QT, dtype: type[np.floating]) -> Affine:
    """raw [rows, row_bytes] uint8 (as gguf's reader gives it) -> the exact MLX affine form.

    dtype: np.float16 or np.float32, the dtype of the scales and biases; ValueError when they
    would not hold the block's values exactly (K-quants in fp16)."""
    rows = raw.shape[0]
    codes, scale32, bias32 = _groups(raw.reshape(-1, _block_bytes(qtype)), qtype)
    scales, biases = scale32.astype(dtype), bias32.astype(dtype)
    if not (
        np.array_equal(scales.astype(np.float32), scale32, equal_nan=True)
        and np.array_equal(biases.astype(np.float32), bias32, equal_nan=True)
    ):
        raise ValueError(f"{qtype.name} scales do not fit {np.dtype(dtype).name} exactly")
    return Affine(
        weight=pack_codes(codes.reshape(rows, -1), EXACT_FORMATS[qtype]),
        scales=scales.reshape(rows, -1),
        biases=biases.reshape(rows, -1),
        bits=EXACT_FORMATS[qtype],
    )


def _block_bytes(qtype: QT) -> int:
    from gguf import GGML_QUANT_SIZES

    return int(GGML_QUANT_SIZES[qtype][1])
