"""Engine configuration, validated at construction (env vars are read only at the CLI edge)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workers.types import MAX_DRAFT_DEPTH

DEFAULT_MODEL_DIR = Path(__file__).parent / "default_model"
KV_BITS = (4, 8)  # quantized KV cache widths (workers/kv_quant.py)
KV_GROUP_SIZES = (32, 64, 128)  # what mx.quantize supports


@dataclass
class EngineConfig:
    draft_depth: int = 4
    max_batch_size: int = 16
    max_context: int | None = None  # None: the model's max_position_embeddings, else 4096
    prefill_step_size: int = 512
    # KV memory for admission, counted in tokens of an unquantized cache (the model's dtype);
    # a quantized cache (kv_bits) fits proportionally more tokens in the same bytes.
    # None: max_batch_size * max_context.
    kv_budget_tokens: int | None = None
    # Tokens one verify forward may carry (B x (K+1)); drafts are clamped to fit
    # (docs/field-failures.md, seed 004: a verifier that refused an oversized window aborted).
    max_verify_tokens: int = 4096
    # Cap each round's depth at the one the engine's own timings say pays best
    # (workers/depth_policy.py). Applies to rows whose tokens do not depend on the depth:
    # greedy and coupled-acceptance rows; rejection-sampled rows keep their depth.
    adaptive_depth: bool = False
    # Engine.load on the CPU: keep a quantized checkpoint's layers quantized (less memory, slower
    # decode) instead of dequantizing them to fp32 at load (workers/loading.upcast_on_cpu).
    keep_quantized: bool = False
    # Build round N+1 on the device before reading round N back, so the host's emit and
    # bookkeeping overlap the device's compute (workers/engine.py). Used while every row is
    # greedy without penalties and the drafter is device-resident (MTP head) or absent;
    # other batches run one round at a time. Tokens are identical either way.
    pipeline: bool = True
    # Pipelined rounds launched before the oldest is read back. 1: the engine reads round N
    # before it builds N+2, so a round costs about (build + encode + device) / 2 where the host's
    # two parts outweigh the device's (H200, 6.6B, B = 1: ~10 ms against 7.7 on the device,
    # bench/results/s64/README.md). 2: N+2 is built before N is read, towards max(build, encode,
    # device); a finished row is found two rounds late (both rounds' slots discarded). Measured
    # on an H100 (bench/results/s66/README.md), 2 over 1 read 0.86-1.09: level at B = 1, lower
    # at B = 32 and on a ~1B model. So 1; 2 is kept for Metal, where nothing has measured it.
    pipeline_depth: int = 1
    # Quantize the target's KV cache per slot (workers/kv_quant.py): None (the model's dtype),
    # 8 or 4 bits, in groups of kv_group_size numbers of one head (must divide the head dim).
    kv_bits: int | None = None
    kv_group_size: int = 64
    # Tokens of prompt KV the worker keeps for reuse by prompts starting the same way
    # (workers/prefix_cache.py), on top of the running batch's KV budget. 0: off. -1: auto, a
    # quarter of the KV budget (the cache then costs at most 25% more KV memory).
    prefix_cache_tokens: int = 0
    prefix_block_tokens: int = 32  # cache granularity: hits are whole blocks
    # Before serving, run rounds at each power-of-two batch size on synthetic prompts
    # (workers/warm_up.py): with a depth policy, every depth timed for it (live traffic then
    # neither probes depths nor prepares drafter state where drafting cannot pay); without
    # one, rounds that build what the first requests would (MLX CUDA: graphs; the CPU and
    # Metal: compiled kernels).
    warm_up: bool = False
    # Steps a waiting request may be held so that it joins the running batch with others (one
    # join's fixed cost paid for several rows; workers/join_gate.py prices the trade from the
    # engine's own steps). 0 (until measured on a GPU): every request joins as soon as a slot
    # frees.
    join_wait_steps: int = 0
    model_id: str = "in-memory"

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, fix: str) -> None:
            if not ok:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r} is invalid: {fix}")

        check("draft_depth", 1 <= self.draft_depth <= MAX_DRAFT_DEPTH, f"use 1..{MAX_DRAFT_DEPTH}")
        check("max_batch_size", self.max_batch_size >= 1, "use an int >= 1")
        check("max_context", self.max_context is None or self.max_context >= 2, "use >= 2")
        check("prefill_step_size", self.prefill_step_size >= 1, "use an int >= 1")
        check("max_verify_tokens", self.max_verify_tokens >= 1, "use an int >= 1")
        check("prefix_cache_tokens", self.prefix_cache_tokens >= -1, "use 0 (off), -1 or N > 0")
        check("prefix_block_tokens", self.prefix_block_tokens >= 1, "use an int >= 1")
        check("join_wait_steps", self.join_wait_steps >= 0, "use 0 (join at once) or more")
        check("pipeline_depth", self.pipeline_depth in (1, 2), "use 1 or 2 rounds in flight")
        check(
            "kv_budget_tokens",
            self.kv_budget_tokens is None or self.kv_budget_tokens >= 2,
            "use None or an int >= 2",
        )
        check(
            "kv_bits",
            self.kv_bits is None or (type(self.kv_bits) is int and self.kv_bits in KV_BITS),
            f"use None (unquantized) or one of {list(KV_BITS)}",
        )
        check(
            "kv_group_size",
            type(self.kv_group_size) is int and self.kv_group_size in KV_GROUP_SIZES,
            f"use one of {list(KV_GROUP_SIZES)} that divides the model's head dim",
        )
