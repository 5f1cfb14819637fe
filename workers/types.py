"""The engine's name for the shared contract types (contract/types.py): the engine modules import
them from here, everyone else from `contract.types`. Nothing is defined here."""

from contract.types import (
    ACCEPTANCE_MODES,
    MAX_DRAFT_DEPTH,
    AcceptanceMode,
    Completion,
    EngineInfo,
    FinishReason,
    RequestOutput,
    RoundStats,
    SamplingParams,
)

__all__ = [
    "ACCEPTANCE_MODES",
    "MAX_DRAFT_DEPTH",
    "AcceptanceMode",
    "Completion",
    "EngineInfo",
    "FinishReason",
    "RequestOutput",
    "RoundStats",
    "SamplingParams",
]
