"""Quantized ragged KV cache (EngineConfig.kv_bits): what one slot stores, what a token costs.

Each slot -- one token's key (or value) for one KV head, a vector of head_dim numbers -- is
quantized on its own by `mx.quantize` along the head dim, in groups of `group_size` that divide
head_dim. No group spans two positions, so a slot's stored bytes are a function of that token's
key alone: not of the window that wrote it, nor of its neighbours. A verify window writes its
drafts' slots; the ones later rejected lie past the row's length and the next window overwrites
them whole (packed weights, scales and biases), quantized from the values plain decoding would
have written there. Every committed position is therefore quantized exactly once, the same way
with or without a drafter, and speculative greedy output equals plain greedy output of the same
kv_bits.

How attention reads the slots depends on the device. On Metal (`read_packed`), the layer has
`bits` and `group_size` attributes, which make mlx-lm's attention call
`quantized_scaled_dot_product_attention` (quantized_matmul for q @ k^T and p @ v; it takes the
ragged boolean mask), so the cache is never dequantized as a whole. MLX's CUDA backend lacks
quantized_matmul for these shapes, and its CPU quantized_matmul
is slow (5x fp32 attention at B = 8 and one query, 5x at five), and so is mx.dequantize (10x a
cast): on the CPU the layer hands attention float keys from `decode`, which unpacks the bytes
with a cast, a multiply and an add (the same numbers as mx.dequantize), and mlx-lm's fused SDPA
runs as for an unquantized cache. Either way the window's own keys are quantized before
attention reads them, as in plain decoding, where a token's key is always read back from the
cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from workers.config import KV_GROUP_SIZES


def packed_reads() -> bool:
    """Read packed slots with quantized matmuls on Metal, or decode them to floats elsewhere.

    MLX's CUDA backend has no quantized_matmul for attention's shapes (seen on an H200,
    MLX 0.32.4: "No implementation for problem shape: 185x256x64x16 ... bits: 8, group size:
    64"), and the CPU's is slow; decoding is exact on every backend.
    """
    return mx.default_device() != mx.cpu and mx.metal.is_available()


@dataclass(frozen=True)
class KVQuant:
    bits: int
    group_size: int = 64
    read_packed: bool = False  # see the module docstring

    @classmethod
    def for_device(cls, bits: int, group_size: int) -> KVQuant:
        return cls(bits, group_size, packed_reads())

    def encode(self, x: mx.array) -> list[mx.array]:
        """[B, H, W, D] -> [packed [B, H, W, D*bits/32] uint32, scales, biases [B, H, W, D/g]]."""
        w, scales, biases = mx.quantize(x, group_size=self.group_size, bits=self.bits)
        return [w, scales, biases]

    def decode(self, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        """Packed slots [B, H, S, D*bits/32] (+ scales, biases [B, H, S, D/g]) -> [B, H, S, D]
        floats, equal to mx.dequantize's: each uint32 holds 32/bits numbers, lowest bits first."""
        u = mx.view(w, mx.uint8)  # [B, H, S, D*bits/8], little-endian: number order kept
        if self.bits == 4:
            u = mx.stack([u & 15, u >> 4], axis=-1).reshape(*u.shape[:-1], -1)
        groups = scales.shape[-1]
        x = u.astype(scales.dtype).reshape(*u.shape[:-1], groups, self.group_size)
        x = x * scales[..., None] + biases[..., None]
        return x.reshape(*u.shape[:-1], groups * self.group_size)

    def slot_bytes(self, dim: int, itemsize: int) -> int:
        """Bytes of `dim` quantized numbers: packed weights + one scale and bias per group."""
        return dim * self.bits // 8 + 2 * (dim // self.group_size) * itemsize


@dataclass(frozen=True)
class AttentionDims:
    """One attention layer's cached widths per token (all KV heads together)."""

    key_dim: int  # n_kv_heads * head_dim of keys
    value_dim: int  # n_kv_heads * head_dim of values
    num_heads: int  # KV heads
    itemsize: int  # bytes per number of the model's activations (what an unquantized slot holds)


def attention_dims(model: object, recurrent: Sequence[bool]) -> list[AttentionDims] | None:
    """Read every attention layer's key/value widths off its projections (mlx-lm layouts:
    `layer.self_attn.{k_proj, v_proj}` and `n_kv_heads` or `num_key_value_heads`); None where
    a layer does not follow them."""
    dims = []
    for layer, rec in zip(getattr(model, "layers", []), recurrent):
        if rec:
            continue
        attn = getattr(layer, "self_attn", None)
        k_proj, v_proj = getattr(attn, "k_proj", None), getattr(attn, "v_proj", None)
        heads = getattr(attn, "n_kv_heads", None) or getattr(attn, "num_key_value_heads", None)
        if k_proj is None or v_proj is None or not heads:
            return None
        # QuantizedLinear weights are packed along the input axis; axis 0 is still the output.
        dtype = (k_proj.scales if "scales" in k_proj else k_proj.weight).dtype
        key_dim, value_dim = int(k_proj.weight.shape[0]), int(v_proj.weight.shape[0])
        dims.append(AttentionDims(key_dim, value_dim, int(heads), dtype.size))
    return dims


def kv_bytes_per_token(dims: Sequence[AttentionDims], quant: KVQuant | None) -> int:
    """Cache bytes one token takes in every attention layer together."""
    total = 0
    for d in dims:
        if quant is None:
            total += (d.key_dim + d.value_dim) * d.itemsize
        else:
            total += quant.slot_bytes(d.key_dim, d.itemsize)
            total += quant.slot_bytes(d.value_dim, d.itemsize)
    return total


def check_group_size(dims: Sequence[AttentionDims], quant: KVQuant) -> None:
    """Groups must tile each head's vector exactly (a group never spans two heads/positions)."""
    for d in dims:
        head_dims = {d.key_dim // d.num_heads, d.value_dim // d.num_heads}
        if all(h % quant.group_size == 0 for h in head_dims):
            continue
        fits = [g for g in KV_GROUP_SIZES if all(h % g == 0 for h in head_dims)]
        if fits:
            raise ValueError(
                f"EngineConfig.kv_group_size={quant.group_size} does not divide this model's "
                f"head dim {sorted(head_dims)}: use one of {fits}"
            )
        raise ValueError(
            f"EngineConfig.kv_bits={quant.bits} needs head dims divisible by 32; this model's "
            f"are {sorted(head_dims)}: use kv_bits=None"
        )


def token_budget(
    model: object, recurrent: Sequence[bool], quant: KVQuant | None, budget_tokens: int
) -> tuple[int, int]:
    """(cache bytes per token, tokens that fit) for KV memory of `budget_tokens` tokens of an
    unquantized cache: admission counts bytes, so a quantized cache admits more tokens."""
    dims = attention_dims(model, recurrent)
    if not dims:  # no attention layers, or a layout attention_dims cannot read
        if quant is not None:
            raise ValueError(
                f"EngineConfig.kv_bits={quant.bits} needs attention layers with "
                "self_attn.k_proj/v_proj (mlx-lm layouts); this model has none: use kv_bits=None"
            )
        return 0, budget_tokens
    if quant is not None:
        check_group_size(dims, quant)
    per_token = kv_bytes_per_token(dims, quant)
    return per_token, budget_tokens * kv_bytes_per_token(dims, None) // per_token
