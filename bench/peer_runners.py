"""One function per system: generate greedy continuations of `prompts`, at most B rows at a time.

Each returns a `Run`: the tokens per prompt (in prompt order), wall time, and the acceptance the
system itself reports. Systems:
    mlx-lm      generate_step (single sequence, the independent reference) and BatchGenerator
    specfleet   Engine (no drafter / MTP drafter), loaded with Engine.load
    mlx-vlm     its BatchGenerator with no drafter / with its Qwen3.5 MTP drafter (batched MTP)
All ignore EOS and produce exactly `max_tokens` per prompt, so tokens/s compare like with like.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

VLM_INSTALL = "pip install --no-deps mlx-vlm==0.7.10"


@dataclass
class Run:
    outputs: list[list[int]]  # [num_prompts][max_tokens]
    seconds: float
    # Drafting systems: mean accepted drafts per row per round, drafts per round, rounds.
    accepted_per_row_round: float | None = None
    drafts_per_row_round: float | None = None
    rounds: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tokens": self.tokens,
            "seconds": round(self.seconds, 4),
            "tokens_per_s": self.tokens / self.seconds,
        }
        if self.accepted_per_row_round is not None:
            out["accepted_per_row_round"] = self.accepted_per_row_round
            out["tokens_per_row_round"] = 1.0 + self.accepted_per_row_round
            out["drafts_per_row_round"] = self.drafts_per_row_round
            out["rounds"] = self.rounds
        return {**out, **self.extra}


def mlx_vlm_status() -> tuple[str | None, str | None]:
    """(version, None) when mlx-vlm's batched MTP path imports, else (None, the error text)."""
    try:
        from importlib.metadata import version

        from mlx_vlm.generate.ar import BatchGenerator  # noqa: F401
        from mlx_vlm.speculative.drafters import load_drafter  # noqa: F401

        return version("mlx-vlm"), None
    except Exception as e:  # noqa: BLE001 - any import failure is the "does not install" case
        return None, f"{type(e).__name__}: {e}"


def reference_greedy(model: Any, prompts: list[list[int]], max_tokens: int) -> tuple[Run, list]:
    """mlx-lm single-sequence greedy decode, plus each step's top-2 logprob gap (near-ties)."""
    from mlx_lm.generate import generate_step

    outputs, gaps = [], []
    t0 = time.perf_counter()
    for p in prompts:
        toks, g = [], []
        for tok, logprobs in generate_step(mx.array(p), model, max_tokens=max_tokens):
            top2 = mx.topk(logprobs, 2)
            g.append(float(mx.abs(top2[0] - top2[1]).item()))
            toks.append(int(tok))
        outputs.append(toks)
        gaps.append(g)
    return Run(outputs, time.perf_counter() - t0), gaps


def mlx_lm_batch(model: Any, prompts: list[list[int]], max_tokens: int, B: int) -> Run:
    from mlx_lm.generate import BatchGenerator

    gen = BatchGenerator(
        model, max_tokens=max_tokens, completion_batch_size=B, prefill_batch_size=B
    )
    t0 = time.perf_counter()
    uids = gen.insert(prompts, max_tokens=[max_tokens] * len(prompts))
    out: dict[int, list[int]] = {u: [] for u in uids}
    done = 0
    while done < len(prompts):
        for r in gen.next_generated():
            out[r.uid].append(int(r.token))
            done += r.finish_reason is not None
    dt = time.perf_counter() - t0
    gen.close()
    return Run([out[u] for u in uids], dt)


def specfleet(
    model_dir: Path, prompts: list[list[int]], max_tokens: int, B: int, depth: int, mtp: bool
) -> Run:
    from workers import Engine, SamplingParams

    engine = Engine.load(
        model_dir, drafter="mtp" if mtp else None, max_batch_size=B, draft_depth=depth if mtp else 1
    )
    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, [sp] * len(prompts))
    dt = time.perf_counter() - t0
    run = Run([list(o.tokens) for o in outs], dt)
    stats = engine.take_round_stats()
    # Median draft and verify time of the rounds that ran the full B rows (without a drafter the
    # verify forward is the one-token decode step), to set a (K+1)-token verify against it.
    full = [s for s in stats if s.batch_size == B and not s.num_prefill_tokens] or stats
    run.extra["round_ms_at_full_batch"] = {
        "draft": 1e3 * float(np.median([s.time_draft_s for s in full])),
        "verify": 1e3 * float(np.median([s.time_verify_s for s in full])),
        "rounds": len(full),
    }
    if mtp:
        drafting = sum(s.num_drafts for s in stats)  # (row, round) pairs that drafted
        run.accepted_per_row_round = sum(s.num_accepted_tokens for s in stats) / max(1, drafting)
        run.drafts_per_row_round = sum(s.num_draft_tokens for s in stats) / max(1, drafting)
        run.rounds = sum(1 for s in stats if s.num_drafts)
    return run


@dataclass
class VlmModel:
    model: Any  # mlx_vlm Model (VL wrapper; .language_model is what BatchGenerator runs)
    processor: Any
    drafter: Any  # Qwen3_5MTPDraftModel, from load_drafter on the same directory


def load_mlx_vlm(model_dir: Path) -> VlmModel:
    from mlx_vlm.speculative.drafters import load_drafter
    from mlx_vlm.utils import load

    model, processor = load(str(model_dir))
    drafter, kind = load_drafter(str(model_dir))
    if kind != "mtp":
        raise RuntimeError(f"mlx-vlm resolved drafter kind {kind!r} for {model_dir}, not 'mtp'")
    # ignore_eos, as every other system here: no stop tokens at all.
    crit = processor.tokenizer.stopping_criteria
    crit.additional_eos_token_ids, crit.eos_token_ids = [], []
    return VlmModel(model, processor, drafter)


def mlx_vlm_batch(
    vlm: VlmModel,
    prompts: list[list[int]],
    max_tokens: int,
    B: int,
    depth: int,
    mtp: bool,
    clamp: bool = True,
) -> Run:
    """mlx-vlm's BatchGenerator, greedy (sampler=None); with mtp, its batched MTP rounds.

    clamp=False is a diagnostic, not how mlx-vlm ships: its Qwen3.5 target declares
    `requires_uniform_batch_acceptance`, which clamps every row of a round to the batch's
    minimum accept count; switching that off for one run measures what the clamp costs and
    whether outputs stay identical without it.
    """
    lm = vlm.model.language_model
    if not clamp:
        lm.requires_uniform_batch_acceptance = False  # instance attribute shadows the class one
    try:
        return _mlx_vlm_batch(vlm, prompts, max_tokens, B, depth, mtp)
    finally:
        lm.__dict__.pop("requires_uniform_batch_acceptance", None)


def _mlx_vlm_batch(
    vlm: VlmModel, prompts: list[list[int]], max_tokens: int, B: int, depth: int, mtp: bool
) -> Run:
    from mlx_vlm.generate.ar import BatchGenerator
    from mlx_vlm.speculative.common import speculative_stats_snapshot

    kwargs: dict[str, Any] = {}
    if mtp:
        # draft_block_size = verify window = 1 bonus + `depth` drafts.
        kwargs = {"draft_model": vlm.drafter, "draft_kind": "mtp", "draft_block_size": depth + 1}
    gen = BatchGenerator(
        vlm.model.language_model,
        vlm.processor,
        max_tokens=max_tokens,
        completion_batch_size=B,
        prefill_batch_size=B,
        **kwargs,
    )
    snap = speculative_stats_snapshot(vlm.drafter)
    t0 = time.perf_counter()
    # As mlx-vlm's own batch_generate (`_generate_batch`): the prompt's input embeddings (and,
    # for Qwen3.5, its text positions) travel as per-row prompt kwargs.
    feats = [vlm.model.get_input_embeddings(mx.array([p])).to_dict() for p in prompts]
    kws = [{k: v for k, v in f.items() if v is not None} for f in feats]
    uids = gen.insert(prompts, [max_tokens] * len(prompts), prompt_kwargs=kws)
    out: dict[int, list[int]] = {u: [] for u in uids}
    while gen.has_work:
        for r in gen.next()[1]:
            if r.token is not None:
                out[r.uid].append(int(r.token))
    dt = time.perf_counter() - t0
    gen.close()
    run = Run([out[u] for u in uids], dt)
    if mtp:
        # Lifetime counters (reset() clears accept_lens per batch group): per round, the mean
        # over the round's rows of accepted drafts, and the drafts per row.
        rounds, accepted, drafted = (
            a - b for a, b in zip(speculative_stats_snapshot(vlm.drafter), snap, strict=True)
        )
        run.rounds = int(rounds)
        run.accepted_per_row_round = accepted / max(1, rounds)
        run.drafts_per_row_round = drafted / max(1, rounds)
    return run
