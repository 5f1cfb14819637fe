"""Factories for a real Engine on tiny random models (importable by Ray workers and the CLI
as `tests.workers.service.real_engine:make_engine`)."""

from __future__ import annotations

import time

from workers import Engine, ModelDrafter


def make_engine(
    drafter: str | None = "model",
    max_batch_size: int = 8,
    draft_depth: int = 3,
    prefix_cache_tokens: int = 0,
) -> Engine:
    from tests.tiny import perturbed, tiny_model

    target = tiny_model("llama", seed=0)
    draft = ModelDrafter(perturbed(target, scale=0.1, seed=1)) if drafter == "model" else None
    return Engine(
        target,
        None,
        drafter=draft,
        draft_depth=draft_depth,
        max_batch_size=max_batch_size,
        prefix_cache_tokens=prefix_cache_tokens,
        prefix_block_tokens=8,
        model_id="tiny-llama",
    )


POISON = [255, 255, 255, 255]


class _Fragile:
    """The real engine, except that step() raises once a POISON prompt was added: a stand-in
    for a fatal engine fault (Metal error, OOM) to show the worker process exits on it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._poisoned = False

    def add_request(self, request_id, prompt, params) -> None:
        self._poisoned |= list(prompt) == POISON
        self._engine.add_request(request_id, prompt, params)

    def step(self):
        if self._poisoned:
            raise RuntimeError("simulated fatal engine fault")
        return self._engine.step()

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


def make_fragile_engine(**kwargs) -> _Fragile:
    return _Fragile(make_engine(**kwargs))


class _Slow:
    """The real engine with a pause before each step, so a test can act mid-generation."""

    def __init__(self, engine: Engine, step_delay_s: float) -> None:
        self._engine = engine
        self._delay = step_delay_s

    def step(self):
        time.sleep(self._delay)
        return self._engine.step()

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


def make_slow_engine(step_delay_s: float = 0.05, **kwargs) -> _Slow:
    return _Slow(make_engine(**kwargs), step_delay_s)
