"""What engine a worker should build: a plain, picklable description (CLI flags and Ray actor
arguments become one of these), so the model is loaded once, inside the worker process."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from typing import Any

from workers.types import MAX_DRAFT_DEPTH


@dataclass(frozen=True)
class EngineSpec:
    model: str | None = None  # mlx-lm model directory; None = the embedded default model
    drafter: str | None = None  # "model:PATH" | "ngram" | "mtp" | None
    draft_depth: int = 4
    # Serving default: each round drafts only as deep as the worker's own timings say pays
    # (EngineConfig.adaptive_depth); draft_depth is then the most it drafts.
    adaptive_depth: bool = True
    max_batch_size: int = 16
    max_context: int | None = None
    keep_quantized: bool = False  # CPU: run a quantized checkpoint quantized (EngineConfig)
    # "package.module:function" returning a ready Engine (custom loaders, tests); overrides model.
    factory: str | None = None
    factory_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.draft_depth, int) and 1 <= self.draft_depth <= MAX_DRAFT_DEPTH):
            raise ValueError(
                f"EngineSpec.draft_depth={self.draft_depth!r} is invalid: use 1..{MAX_DRAFT_DEPTH}"
            )
        if not (isinstance(self.max_batch_size, int) and self.max_batch_size >= 1):
            raise ValueError(
                f"EngineSpec.max_batch_size={self.max_batch_size!r} is invalid: use an int >= 1"
            )
        if self.factory is not None and self.factory.count(":") != 1:
            raise ValueError(
                f"EngineSpec.factory={self.factory!r} is invalid: use 'package.module:function'"
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace, **extra: Any) -> EngineSpec:
        """The spec the flags of add_engine_args describe."""
        return cls(
            model=args.model,
            drafter=args.drafter,
            draft_depth=args.draft_depth,
            adaptive_depth=not args.fixed_depth,
            max_batch_size=args.max_batch_size,
            max_context=args.max_context,
            keep_quantized=args.keep_quantized,
            **extra,
        )

    @property
    def model_name(self) -> str:
        """The `model` metrics label."""
        if self.factory is not None:
            return self.factory.rsplit(":", 1)[1]
        return self.model.rstrip("/").rsplit("/", 1)[-1] if self.model else "specfleet-default"

    def build(self) -> Any:
        """Load the engine (imports mlx); runs on the worker's engine thread."""
        if self.factory is not None:
            module, func = self.factory.split(":")
            return getattr(importlib.import_module(module), func)(**self.factory_kwargs)
        from workers import Engine

        config: dict[str, Any] = {
            "draft_depth": self.draft_depth,
            "adaptive_depth": self.adaptive_depth,
            "max_batch_size": self.max_batch_size,
        }
        if self.max_context is not None:
            config["max_context"] = self.max_context
        if self.keep_quantized:
            config["keep_quantized"] = True
        return Engine.load(self.model, drafter=self.drafter, **config)


def add_engine_args(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The engine flags `specfleet worker` and `specfleet up` share (EngineSpec.from_args)."""
    p.add_argument("--model", help="mlx-lm model directory (default: the embedded default model)")
    p.add_argument("--drafter", help="'ngram', 'mtp' or 'model:PATH' (default: none)")
    p.add_argument("--draft-depth", type=int, default=4, help="most drafts per row per round")
    p.add_argument(
        "--fixed-depth", action="store_true",
        help="always draft --draft-depth tokens (default: as deep as measured to pay)",
    )  # fmt: skip
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--max-context", type=int)
    p.add_argument(
        "--keep-quantized", action="store_true",
        help="CPU: keep a quantized model's layers quantized (default: dequantize to fp32 at load)",
    )  # fmt: skip
