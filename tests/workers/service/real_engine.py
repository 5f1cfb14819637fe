"""Factories for a real Engine on tiny random models (importable by Ray workers and the CLI
as `tests.workers.service.real_engine:make_engine`)."""

from __future__ import annotations

from workers import Engine, ModelDrafter


def make_engine(
    drafter: str | None = "model", max_batch_size: int = 8, draft_depth: int = 3
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
        model_id="tiny-llama",
    )
