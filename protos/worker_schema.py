"""The worker Session body schema (v1) that both sides' codecs share: content types, the
`submit` item and its SamplingParams map (field names, implicit defaults, validation, packing).

protos/specfleet/v1/worker.proto documents the bodies; this module is their one implementation.
The scheduler's codec (cluster/worker_codec.py) encodes submits with it and the worker's codec
(workers/service/rpc_codec.py) decodes them with it, so a field added to SamplingParams travels
both ways or neither. Imports neither grpc nor mlx (`workers.types` is plain data).

Reading is strict: unknown keys, wrong types and non-finite floats raise `WireError` naming the
field, with the gRPC status code name the worker maps it to.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from protos.packing import pack_u32, unpack_u32
from workers.types import SamplingParams

SCHEMA_VERSION = 1
CT_BATCH = "application/vnd.specfleet.batch+msgpack"
CT_EVENTS = "application/vnd.specfleet.events+msgpack"
CT_INFO = "application/vnd.specfleet.info+msgpack"
SUBMIT_KEYS = frozenset({"id", "prompt", "params"})
STATS_KEYS = (
    "num_prompt_tokens",
    "num_generated_tokens",
    "num_draft_tokens",
    "num_accepted_tokens",
)

INVALID_ARGUMENT = "INVALID_ARGUMENT"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"

PARAM_FIELDS = {f.name: f for f in dataclasses.fields(SamplingParams)}
_BOOLS = tuple(n for n, f in PARAM_FIELDS.items() if f.type == "bool")
_FLOATS = tuple(n for n, f in PARAM_FIELDS.items() if f.type == "float")


class WireError(Exception):
    """A body (or one request in it) that cannot be read; `code` names the gRPC status."""

    def __init__(self, code: str, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.code = code
        self.field = field
        self.message = message


def expect_map(obj: object, name: str, allowed: set[str] | frozenset[str] | dict) -> dict:
    if not isinstance(obj, dict):
        raise WireError(INVALID_ARGUMENT, name, f"expected a map, got {type(obj).__name__}")
    extra = sorted(str(k) for k in obj if k not in allowed)
    if extra:
        raise WireError(
            INVALID_ARGUMENT,
            f"{name}.{extra[0]}",
            f"unknown key; allowed keys are {sorted(allowed)}",
        )
    return obj


def expect_list(obj: object, name: str, max_len: int) -> list:
    if not isinstance(obj, list):
        raise WireError(INVALID_ARGUMENT, name, f"expected an array, got {type(obj).__name__}")
    if len(obj) > max_len:
        raise WireError(RESOURCE_EXHAUSTED, name, f"{len(obj)} entries exceeds the limit {max_len}")
    return obj


def unpack_tokens(data: object, field: str) -> list[int]:
    try:
        return unpack_u32(data)
    except ValueError as e:
        raise WireError(INVALID_ARGUMENT, field, str(e)) from None


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    """The `params` map: only non-default fields (the receiver's SamplingParams fills the rest);
    token-id stops travel packed."""
    out: dict[str, Any] = {}
    for name, f in PARAM_FIELDS.items():
        value = getattr(params, name)
        if value == f.default or (
            f.default_factory is not dataclasses.MISSING and value == f.default_factory()
        ):
            continue
        if name == "stop":
            value = [s if isinstance(s, str) else pack_u32(s) for s in value]
        elif name == "stop_token_ids":
            value = pack_u32(value)
        out[name] = value
    return out


def params_from_wire(obj: object, name: str, max_stop_sequences: int) -> SamplingParams:
    """SamplingParams from a `params` map; raises WireError naming the field on any bad value."""
    kw = dict(expect_map(obj, name, PARAM_FIELDS))
    if "stop" in kw:
        stops = expect_list(kw["stop"], f"{name}.stop", max_stop_sequences)
        kw["stop"] = tuple(
            s if isinstance(s, str) else tuple(unpack_tokens(s, f"{name}.stop[{i}]"))
            for i, s in enumerate(stops)
        )
    for key in _BOOLS:
        if key in kw and not isinstance(kw[key], bool):
            raise WireError(INVALID_ARGUMENT, f"{name}.{key}", f"{kw[key]!r:.40} is not a bool")
    for key in _FLOATS:
        if isinstance(kw.get(key), float) and not math.isfinite(kw[key]):
            raise WireError(
                INVALID_ARGUMENT, f"{name}.{key}", f"{kw[key]!r} is not a finite number"
            )
    if "stop_token_ids" in kw:
        kw["stop_token_ids"] = tuple(unpack_tokens(kw["stop_token_ids"], f"{name}.stop_token_ids"))
    try:
        return SamplingParams(**kw)
    except (ValueError, TypeError) as e:
        m = re.match(r"SamplingParams\.(\w+)=", str(e))
        raise WireError(INVALID_ARGUMENT, f"{name}.{m.group(1)}" if m else name, str(e)) from None


def submit_to_wire(request_id: str, prompt: Sequence[int], params: SamplingParams) -> dict:
    """One `submit` item: prompt as packed uint32 token ids."""
    return {"id": request_id, "prompt": pack_u32(prompt), "params": params_to_wire(params)}
