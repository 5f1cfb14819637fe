"""Packed little-endian 4-byte arrays: how token ids (uint32) and logprobs (float32) travel in
every specfleet message, worker Session bodies and Gateway fields alike. Pure `struct`, so both
sides' codecs share it without importing grpc or mlx; each codec names the field in its errors.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence


def pack_u32(values: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def pack_f32(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack_u32(data: object) -> list[int]:
    """Raises ValueError saying what is wrong with `data`."""
    return list(struct.unpack(f"<{_count(data, 'uint32')}I", data))  # type: ignore[arg-type]


def unpack_f32(data: object) -> list[float]:
    """Raises ValueError saying what is wrong with `data`."""
    return list(struct.unpack(f"<{_count(data, 'float32')}f", data))  # type: ignore[arg-type]


def _count(data: object, kind: str) -> int:
    if not isinstance(data, bytes):
        raise ValueError(f"expected packed {kind} bytes, got {type(data).__name__}")
    if len(data) % 4:
        raise ValueError(f"length {len(data)} is not a multiple of 4 ({kind} LE)")
    return len(data) // 4
