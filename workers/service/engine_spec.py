"""What engine a worker should build: a plain, picklable description (CLI flags and Ray actor
arguments become one of these), so the model is loaded once, inside the worker process."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any

from workers.config import KV_BITS, KV_GROUP_SIZES, EngineConfig


def serving_config(**overrides: Any) -> EngineConfig:
    """EngineConfig with the serving defaults: each round drafts only as deep as the worker's
    own timings say pays (adaptive_depth), measured at startup (warm_up), and prompts reuse
    cached prefixes (prefix_cache_tokens=-1: a quarter of the KV budget). The library defaults
    are off."""
    defaults = {"adaptive_depth": True, "warm_up": True, "prefix_cache_tokens": -1}
    return EngineConfig(**{**defaults, **overrides})


@dataclass(frozen=True)
class EngineSpec:
    model: str | None = None  # mlx-lm model directory; None = the embedded default model
    drafter: str | None = None  # "model:PATH" | "ngram" | "mtp" | None
    config: EngineConfig = field(default_factory=serving_config)  # validated where built
    # "package.module:function" returning a ready Engine (custom loaders, tests); overrides model.
    factory: str | None = None
    factory_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.config, EngineConfig):
            raise TypeError(f"EngineSpec.config={self.config!r:.60} is not an EngineConfig")
        if self.factory is not None and self.factory.count(":") != 1:
            raise ValueError(
                f"EngineSpec.factory={self.factory!r} is invalid: use 'package.module:function'"
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace, **extra: Any) -> EngineSpec:
        """The spec the flags of add_engine_args describe."""
        config = serving_config(
            draft_depth=args.draft_depth,
            adaptive_depth=not args.fixed_depth,
            max_batch_size=args.max_batch_size,
            max_context=args.max_context,
            keep_quantized=args.keep_quantized,
            kv_bits=args.kv_bits,
            kv_group_size=args.kv_group_size,
            prefix_cache_tokens=args.prefix_cache_tokens,
            warm_up=not args.no_warm_up,
            pipeline_depth=args.pipeline_depth,
        )
        return cls(model=args.model, drafter=args.drafter, config=config, **extra)

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

        config = dataclasses.asdict(self.config)
        if config["model_id"] == EngineConfig.model_id:
            del config["model_id"]  # Engine.load names the model after its directory
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
    p.add_argument(
        "--no-warm-up", action="store_true",
        help="start serving at once: the adaptive depth learns each batch size's costs on "
        "traffic (default: measured on synthetic prompts at startup, ~2 s on a 2-core CPU)",
    )  # fmt: skip
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--max-context", type=int)
    p.add_argument(
        "--keep-quantized", action="store_true",
        help="CPU: keep a quantized model's layers quantized (default: dequantize to fp32 at load)",
    )  # fmt: skip
    p.add_argument(
        "--prefix-cache-tokens", type=int, default=-1, metavar="N",
        help="prompt-prefix KV tokens kept for reuse; 0 = off (default: a quarter of the KV budget)",
    )  # fmt: skip
    p.add_argument(
        "--kv-bits", type=int, choices=KV_BITS,
        help="quantize the KV cache to this many bits per number (default: the model's dtype); "
        "admission then fits more tokens in the same memory",
    )  # fmt: skip
    p.add_argument(
        "--pipeline-depth", type=int, choices=(1, 2), default=EngineConfig.pipeline_depth,
        help="pipelined rounds launched before the oldest is read back; 2 builds round N+2 "
        "before reading N (for hosts whose graph building rivals the device; not yet measured "
        "on one: bench/results/s64/README.md)",
    )  # fmt: skip
    p.add_argument(
        "--kv-group-size", type=int, choices=KV_GROUP_SIZES, default=EngineConfig.kv_group_size,
        help="numbers of one head that share a KV quantization scale (must divide the head dim)",
    )  # fmt: skip
