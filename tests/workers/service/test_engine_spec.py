"""EngineSpec holds an EngineConfig (one set of engine fields, one validation) with the serving
default of adaptive depth; the flags and build() pass it through unchanged."""

from __future__ import annotations

import argparse

import pytest

from workers.config import EngineConfig
from workers.service.engine_spec import EngineSpec, add_engine_args


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_engine_args(p)
    return p.parse_args(list(argv))


def test_flags_become_one_engine_config() -> None:
    spec = EngineSpec.from_args(parse("--draft-depth", "3", "--max-batch-size", "5"))
    assert spec.config == EngineConfig(
        draft_depth=3, max_batch_size=5, adaptive_depth=True, prefix_cache_tokens=-1, warm_up=True
    )
    cold = EngineSpec.from_args(parse("--no-warm-up"))
    assert cold.config.warm_up is False and EngineConfig().warm_up is False  # library default
    fixed = EngineSpec.from_args(parse("--fixed-depth"))
    assert fixed.config.adaptive_depth is False and EngineSpec().config.adaptive_depth is True
    with pytest.raises(ValueError, match=r"EngineConfig\.draft_depth=99"):
        EngineSpec.from_args(parse("--draft-depth", "99"))
    with pytest.raises(TypeError, match="EngineConfig"):
        EngineSpec(config={"draft_depth": 2})  # type: ignore[arg-type]


def test_build_passes_the_config_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import Engine

    seen: dict = {}
    monkeypatch.setattr(Engine, "load", lambda path, drafter, **cfg: seen.update(cfg) or "eng")
    spec = EngineSpec.from_args(parse("--draft-depth", "2", "--max-context", "64"))
    assert spec.build() == "eng"
    assert EngineConfig(**seen) == EngineConfig(
        draft_depth=2,
        max_context=64,
        adaptive_depth=True,
        prefix_cache_tokens=-1,
        warm_up=True,
        model_id=EngineConfig.model_id,
    )
    assert "model_id" not in seen  # Engine.load names the model after its directory


def test_prefix_cache_flag_serving_default_and_validation() -> None:
    assert EngineConfig().prefix_cache_tokens == 0  # the library default: off
    assert EngineSpec().config.prefix_cache_tokens == -1  # serving: auto-sized
    assert EngineSpec.from_args(parse()).config.prefix_cache_tokens == -1
    assert EngineSpec.from_args(parse("--prefix-cache-tokens", "0")).config.prefix_cache_tokens == 0
    sized = EngineSpec.from_args(parse("--prefix-cache-tokens", "8192"))
    assert sized.config.prefix_cache_tokens == 8192
    with pytest.raises(ValueError, match=r"EngineConfig\.prefix_cache_tokens=-5 is invalid"):
        EngineSpec.from_args(parse("--prefix-cache-tokens", "-5"))
    with pytest.raises(ValueError, match=r"EngineConfig\.prefix_block_tokens=0 is invalid"):
        EngineConfig(prefix_block_tokens=0)
