"""Strict, bounded reading of msgpack fields, for the worker codec (protos/worker_codec.py owns
the wire format: its schema, limits and messages; these are the checks it reads each field
with). Every failure raises `WireError` naming the field, what was wrong, and the status the
server answers with.
"""

from __future__ import annotations

from typing import Any

import msgpack

from contract.status import StatusCode
from protos.packing import unpack_u32

INVALID = StatusCode.INVALID_ARGUMENT


class WireError(Exception):
    """A message (or one request in it) that cannot be read; `code` is the status to answer."""

    def __init__(self, code: StatusCode, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.code = code
        self.field = field
        self.message = message


def unpack_tokens(data: object, where: str) -> list[int]:
    try:
        return unpack_u32(data)
    except ValueError as e:
        raise WireError(INVALID, where, str(e)) from None


def expect_map(obj: object, name: str, allowed: frozenset[str] | dict) -> dict:
    if not isinstance(obj, dict):
        raise WireError(INVALID, name, f"expected a map, got {type(obj).__name__}")
    extra = sorted(str(k) for k in obj if k not in allowed)
    if extra:
        raise WireError(
            INVALID, f"{name}.{extra[0]}", f"unknown key; allowed keys are {sorted(allowed)}"
        )
    return obj


def expect_list(obj: object, name: str, max_len: int) -> list:
    if not isinstance(obj, list):
        raise WireError(INVALID, name, f"expected an array, got {type(obj).__name__}")
    if len(obj) > max_len:
        raise WireError(
            StatusCode.RESOURCE_EXHAUSTED, name, f"{len(obj)} entries exceeds the limit {max_len}"
        )
    return obj


def expect_str(obj: object, name: str) -> str:
    if not isinstance(obj, str) or not obj:
        raise WireError(INVALID, name, f"expected a non-empty string, got {obj!r:.80}")
    return obj


def unpack_body(body: bytes, field_name: str, max_bytes: int) -> Any:
    """One msgpack object filling `body` exactly, read with a buffer of at most `max_bytes`."""
    unpacker = msgpack.Unpacker(
        None, raw=False, strict_map_key=True, use_list=True, max_buffer_size=max_bytes
    )
    try:
        unpacker.feed(body)
    except msgpack.BufferFull:
        raise WireError(
            StatusCode.RESOURCE_EXHAUSTED,
            field_name,
            f"{len(body)} bytes exceeds max_body_bytes={max_bytes}",
        ) from None
    try:
        obj = unpacker.unpack()
    except msgpack.OutOfData:
        raise WireError(INVALID, field_name, "truncated or empty msgpack") from None
    except Exception as e:  # msgpack raises several types (ValueError, FormatError, StackError ...)
        raise WireError(
            INVALID, field_name, f"malformed msgpack: {type(e).__name__}: {e}"
        ) from None
    if unpacker.tell() != len(body):
        raise WireError(
            INVALID, field_name, f"{len(body) - unpacker.tell()} trailing bytes after the map"
        )
    return obj
