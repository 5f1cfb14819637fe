"""What an engine reports of itself to the service and the scheduler: its model, capacity and
load (`EngineInfo`), counted over running, prefilling and waiting rows alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers.types import EngineInfo

if TYPE_CHECKING:
    from workers.engine import Engine


def engine_info(engine: Engine) -> EngineInfo:
    prefilling = engine._prefill.rows if engine._prefill else []
    queued = len(engine.waiting) + len(prefilling)
    return EngineInfo(
        model_id=engine.config.model_id,
        vocab_size=engine.vocab_size,
        max_context=engine.max_context,
        drafter=getattr(engine.drafter, "name", "none"),
        draft_depth=engine.config.draft_depth,
        max_batch_size=engine.config.max_batch_size,
        num_running=len(engine.rows),
        num_waiting=len(engine.waiting) + len(engine._inbox) + len(prefilling),
        free_slots=max(0, engine.config.max_batch_size - len(engine.rows) - queued),
        kv_budget_tokens=engine.kv_budget,
        kv_used_tokens=sum(engine._reserve(r) for r in engine.rows + prefilling),
        eos_token_ids=sorted(engine.eos_ids),
        prefix_cache_tokens=engine.prefix_cache.capacity_tokens
        if engine.prefix_cache.enabled
        else 0,
        prefix_cache_used_tokens=engine.prefix_cache.used_tokens,
        prefix_cache_state=engine.prefix_cache.disabled_reason or "on",
    )
