"""Strict protobuf reading, shared by the two codecs (protos/worker_codec.py,
protos/gateway_codec.py), each of which turns `StrictPbError` into its own error type.

gRPC's generated deserializer answers INTERNAL for malformed bytes and silently drops unknown
fields, so a misspelt field of a newer client would be ignored; here both are refused, with
the field path that carries them, at any depth.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet


class StrictPbError(ValueError):
    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"{where}: {detail}")
        self.where, self.detail = where, detail


def parse_strict(cls: Any, raw: bytes) -> Any:
    """A `cls` message from bytes; malformed bytes or an unknown field raise StrictPbError."""
    try:
        msg = cls.FromString(raw)
    except DecodeError as e:
        raise StrictPbError(cls.__name__, f"malformed protobuf: {e}") from None
    check_known(msg, cls.__name__)
    return msg


def check_known(msg: Any, where: str) -> None:
    """Refuse unknown fields in `msg` and every message inside it."""
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({f.field_number for f in unknown})
        raise StrictPbError(where, f"unknown protobuf field number(s) {numbers}")
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:  # a map: its values may be messages
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    check_known(item, f"{where}.{field.name}[{key!r}]")
            continue
        if field.is_repeated:
            for i, item in enumerate(value):
                check_known(item, f"{where}.{field.name}[{i}]")
        else:
            check_known(value, f"{where}.{field.name}")
