"""What every row drafts this round: its depth (request, engine, policy cap, tokens left,
verify budget) and the drafter's proposal for those depths.

On a backend that builds per round graph (MLX CUDA), `same_graph` keeps every drafting round
one graph: the drafter drafts as deep as the rows allow and only the verify's counts carry the
policy's cap, and the drafts are padded to draft_depth, or to the fewer that max_verify_tokens
leaves a row at this batch size. Measured on an H200 at B=32: depth 3 with every 8th round at 2
(no policy) ran at 0.39-0.89x of depth 3 throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers import routes
from workers.backend import Backend
from workers.compiled_step import COMPILE_ENV
from workers.config import EngineConfig
from workers.depth_policy import DepthPolicy
from workers.drafters.base import Drafter, DraftRequest, Proposal, empty_proposal, padded
from workers.rows import Row
from workers.sampling.round import RoundSampling
from workers.types import MAX_DRAFT_DEPTH as MAX_DEPTH


@dataclass
class Attached:
    """A drafter set up for an engine (or set aside: `drafter` None and `off` saying why)."""

    drafter: Drafter | None
    needs_hidden: bool  # the drafter reads the target's hidden states
    post_norm: bool  # ... after the target's final norm
    policy: DepthPolicy | None
    off: str = ""


def attach_drafter(
    drafter: Drafter | None, model: object, config: EngineConfig, backend: Backend
) -> Attached:
    """Set the drafter up for this engine: its routes, the hidden it reads, its depth policy."""
    needs_hidden = bool(getattr(drafter, "needs_target_hidden", False))
    # Hand an MTP head the hidden it reads; post-norm is the lm_head's input, free to return.
    post_norm = needs_hidden and getattr(drafter, "hidden_norm", "") == "post_norm"
    if post_norm:
        drafter.engine_hidden = "post_norm"  # type: ignore[union-attr]
    if backend.builds_per_shape and hasattr(drafter, "pad_packed_to"):
        drafter.pad_packed_to = 8  # type: ignore[union-attr]
    compiles = backend.wants(COMPILE_ENV) and hasattr(drafter, "compile_steps")
    for own in (getattr(drafter, "head", None), getattr(drafter, "model", None)):
        if own is not None:  # an MTP head's layer, a draft model (the target's are routed)
            # before compile_steps: a trace's key names classes. No stacks where steps compile:
            # the trace lends its weights as stand-ins, which no stack holds (its linears would
            # fall back to plain GEMMs, losing the row and skinny routes).
            routes.install(own, backend, stack=not compiles)
    if compiles:
        drafter.compile_steps()  # type: ignore[union-attr]
    if drafter is None or not config.adaptive_depth:
        return Attached(drafter, needs_hidden, post_norm, None)
    policy = DepthPolicy(
        config.draft_depth,
        extremes_only=backend.builds_per_shape,
        one_off_max=3 if backend.builds_per_shape else 0,  # compiles per span: seconds
        run=4 if backend.builds_per_shape else 1,  # a switch rebuilds graphs: depths held
        # a draining batch's new sizes pay builds there (round_costs.cost_table); on the CPU a
        # larger batch's warm-up cells (short contexts) would cap live ones (the demo's batch
        # job read 0.80 and 0.94 with the cap against 1.08 and 0.99 without, s35)
        cap_by_larger=backend.builds_per_shape,
        hold_depth=backend.builds_per_shape,
        live_probes=not backend.builds_per_shape,  # each a run of graph switches there
        job_end=not backend.builds_per_shape,
    )
    cost_ratio = getattr(drafter, "cost_ratio", None)
    if cost_ratio is not None:
        # A draft model clearly slower than the target can never pay: no probing needed.
        policy.draft_cost_ratio = cost_ratio(model)
    if policy.hopeless:
        # A draft forward costs at least `hopeless_ratio` target forwards: drafting can never
        # pay, so the engine runs as a plain one, without the drafter's and the policy's host
        # work per round and per join (B=1 on the 2-core CPU: 0.965x plain with them, 1.011x
        # without, 8 alternating pairs).
        name = getattr(drafter, "name", type(drafter).__name__)
        why = f"{name}: one draft forward costs {policy.draft_cost_ratio:.2f} target forwards"
        return Attached(None, False, False, None, why)
    return Attached(drafter, needs_hidden, post_norm, policy)


def propose_round(
    drafter: Drafter | None,
    rows: Sequence[Row],
    config: EngineConfig,
    policy: DepthPolicy | None,
    sampling: RoundSampling | None,
    in_flight: int = 0,
    same_graph: bool = False,
) -> Proposal:
    """The round's proposal ([B, K] drafts, per-row counts). `in_flight`: tokens a row may
    already have emitted in a round the host has not read (pipelined rounds)."""
    B = len(rows)
    per_row = config.max_verify_tokens // max(B, 1)
    cap = policy.choose(B) if policy is not None else None
    depths = row_depths(rows, config.draft_depth, per_row, cap, in_flight)  # [B]
    if drafter is None or depths.max(initial=0) == 0:
        return empty_proposal(B)
    greedy_same_graph = same_graph and sampling is None
    ask = depths
    if greedy_same_graph and cap is not None and cap < config.draft_depth:
        ask = row_depths(rows, config.draft_depth, per_row, None, in_flight)
    request = DraftRequest(histories=[r.history for r in rows], depths=ask)
    if sampling is not None:
        request.select = sampling.select  # per-row sampled drafts (and q for rejection)
    proposal = drafter.propose(request)
    if ask is not depths:
        proposal.counts = np.minimum(proposal.counts, depths)
    # One width per batch size: the deepest any row may draft here (max_verify_tokens caps
    # it at large B), not draft_depth, so a cap on the verify's tokens narrows its graph too.
    width = min(config.draft_depth, max(0, per_row - 1))
    if greedy_same_graph and 0 < proposal.tokens.shape[1] < width:
        proposal = padded(proposal, width)
    return proposal


def joining_tail(
    drafter: Drafter | None, needs_hidden: bool, policy: DepthPolicy | None, batch_size: int
) -> int:
    """Prompt positions whose target hidden a joining row's MTP head reads (0: none).

    None where the depth policy has settled on plain decoding for the batch the rows join
    (`batch_size`: the running rows, the joiners, and the waiting requests that will fill the
    free slots): the head would not read them (on the 2-core CPU at B=16 the hidden and the
    head's prompt pairs made MTP's prefill 7-12% dearer than a plain one). If drafting resumes,
    such a row's head starts from the pairs of its verifies (drafters/mtp.py)."""
    if not needs_hidden or (policy is not None and policy.settled_plain(batch_size)):
        return 0
    return int(getattr(drafter, "prompt_window", 0))


def row_depths(
    rows: Sequence[Row],
    draft_depth: int,
    verify_tokens_per_row: int,
    cap: int | None,
    in_flight: int = 0,
) -> np.ndarray:
    """[B] each row's draft depth this round: the request's or the engine's `draft_depth`,
    clamped to what fits, and to the policy's `cap` where the row's tokens allow it.

    The bonus token counts against max_tokens and the context, and one verify forward carries
    at most max_verify_tokens (B * verify_tokens_per_row) tokens, so deep drafts shrink instead
    of failing. The cap applies to depth-invariant rows only (greedy, coupled sampling).
    `in_flight`: tokens a row may have emitted in a pipelined round not read yet (greedy rows
    only, whose tokens do not depend on depth), so the budget is counted conservatively.
    """
    capacity = max(0, verify_tokens_per_row - 1)
    row_cap = cap if cap is not None and cap < draft_depth else MAX_DEPTH
    return np.array(
        [
            max(
                0,
                min(
                    r.params.draft_depth or draft_depth,
                    row_cap if r.params.depth_invariant else MAX_DEPTH,
                    r.remaining - in_flight - 1,
                    capacity,
                ),
            )
            for r in rows
        ],
        dtype=np.int64,
    )
