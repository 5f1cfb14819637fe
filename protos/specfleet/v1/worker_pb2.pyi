from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Payload(_message.Message):
    __slots__ = ("content_type", "schema_version", "body")
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    content_type: str
    schema_version: int
    body: bytes
    def __init__(self, content_type: _Optional[str] = ..., schema_version: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: Payload
    def __init__(self, payload: _Optional[_Union[Payload, _Mapping]] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: Payload
    def __init__(self, payload: _Optional[_Union[Payload, _Mapping]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: Payload
    def __init__(self, payload: _Optional[_Union[Payload, _Mapping]] = ...) -> None: ...
