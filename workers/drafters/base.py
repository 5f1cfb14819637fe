"""The drafter protocol: propose up to k_r tokens for each row r of a batch.

The engine owns the rows; a drafter mirrors the batch's membership (rows appended by
`add_rows`, removed by `keep_rows`) and learns the outcome of each round through `commit`.
Histories are the rows' committed tokens (prompt + output); the last token of a history is
the one the target has not consumed yet, so it is the first thing a drafter must condition on.

What the engine reads from or sets on a drafter, all declared here: `needs_target_hidden` and
`device_resident` (every drafter), and two capabilities only some drafters have, each its own
protocol so that a drafter without it still is a `Drafter`:
- `TargetHiddenDrafter` (needs_target_hidden, e.g. the MTP head): the engine reads
  `hidden_norm` and sets `engine_hidden` to the hidden it hands over.
- `BoundedDrafter` (a device-resident drafter with its own ragged cache): the engine calls
  `tighten` after reading each pipelined round.
The engine looks the optional members up with getattr, so a drafter lacking one is served
without that step; tests/workers/engine/test_drafter_protocol.py checks the drafters here
provide what they claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

# Picks one draft token per row from draft logits [B, V] at draft step `step` (0-based);
# returns tokens [B] int32 and the draft distribution q [B, V] (None for a point mass).
TokenSelector = Callable[[mx.array, int], tuple[mx.array, mx.array | None]]


def greedy_select(logits: mx.array, step: int) -> tuple[mx.array, mx.array | None]:
    return mx.argmax(logits, axis=-1).astype(mx.int32), None


@dataclass
class DraftRequest:
    histories: Sequence[Sequence[int]]  # per row: committed tokens, last one unverified
    depths: np.ndarray  # [B] int, tokens wanted per row (0: this row drafts nothing)
    select: TokenSelector = greedy_select
    # Target hidden states of the previous verify window, for MTP heads: [B, W, H] or None.
    target_hidden: mx.array | None = None


@dataclass
class Proposal:
    # [B, K] int32, K = max(depths); row r's valid prefix is counts[r]. A device-resident
    # drafter (MTP head) leaves it a lazy mx.array: the verify consumes it without a host sync.
    tokens: np.ndarray | mx.array
    counts: np.ndarray  # [B] int, 0 <= counts[r] <= depths[r]
    probs: mx.array | None = None  # [B, K, V] draft distribution q, None = point mass

    def device_tokens(self) -> mx.array:
        """[B, K] int32 on the device. A lazy array stays lazy: mx.array(lazy) would copy it,
        which evaluates it (and whatever it depends on: the round still in flight)."""
        t = self.tokens
        return (t if isinstance(t, mx.array) else mx.array(t)).astype(mx.int32)


class Drafter(Protocol):
    name: str
    needs_target_hidden: bool
    # Proposes from device state alone (no host histories, no host sync), so the engine may
    # build a round before it has read the previous one (workers/engine.py, pipelined rounds).
    device_resident: bool

    def add_rows(self, histories: Sequence[Sequence[int]], hidden: mx.array | None = None) -> None:
        """Rows appended at the end of the batch (their prompts, last token unverified).

        hidden: [n, P, H], given only to drafters with needs_target_hidden: row r's target
        hidden at its last min(prompt_window, len - 1) prompt positions (h_t for the pairs
        (h_t, x_{t+1}) ending at the newest token), left-aligned and right-padded.
        """

    def keep_rows(self, keep: Sequence[int]) -> None:
        """Keep only these batch rows, in this order."""

    def propose(self, request: DraftRequest) -> Proposal:
        """Draft tokens for every row in one batched pass (no per-row loops over models)."""

    def commit(
        self,
        num_accepted: np.ndarray | mx.array,
        hidden: mx.array | None = None,
        tokens: mx.array | None = None,
    ) -> None:
        """After verify: row r accepted num_accepted[r] of its drafts (any rows, any counts).

        hidden: [B, K+1, H] target hidden states of the verify window (needs_target_hidden).
        tokens: [B, K+1] the tokens each row committed (first num_accepted[r] + 1 valid).
        num_accepted is a device array only for drafters with `device_resident` set (their
        rounds are built before the host reads the last one: workers/engine.py pipelining).
        """


@runtime_checkable
class TargetHiddenDrafter(Drafter, Protocol):
    """A drafter fed the target's hidden states (needs_target_hidden = True: an MTP head).

    The target hidden exists in two forms: 'pre_norm' (the last decoder layer's output) and
    'post_norm' (after the target's final norm: the lm_head's input, free to return)."""

    @property
    def hidden_norm(self) -> str:
        """'pre_norm' | 'post_norm': the form this drafter reads (a checkpoint setting)."""

    # 'pre_norm' | 'post_norm': the form the engine hands to add_rows/commit. The drafter starts
    # at 'pre_norm' and converts itself; an engine whose forwards return the post-norm hidden
    # (hidden_norm == 'post_norm') sets 'post_norm' once, before the first add_rows.
    engine_hidden: str
    # Prompt positions whose hidden add_rows takes (the engine computes no others).
    prompt_window: int


@runtime_checkable
class BoundedDrafter(Drafter, Protocol):
    """A device-resident drafter with its own ragged cache, whose host-side length bounds the
    engine tightens once it has read a pipelined round (as it does for the target's cache)."""

    def tighten(self, bounds: np.ndarray, rows: np.ndarray) -> None:
        """bounds: [B] int64, each row's exact committed length (history minus its unverified
        last token); rows: [B] bool, the rows to narrow (live ones; the others keep theirs)."""


def empty_proposal(batch_size: int) -> Proposal:
    return Proposal(
        tokens=np.zeros((batch_size, 0), dtype=np.int32),
        counts=np.zeros(batch_size, dtype=np.int64),
    )


def padded(proposal: Proposal, depth: int) -> Proposal:
    """The same drafts in a [B, depth] array (zeros after each row's own); counts unchanged,
    so nothing past a row's count is ever accepted. Greedy proposals only (no probs)."""
    tokens = proposal.device_tokens()
    assert proposal.probs is None, "padding applies to greedy proposals"
    pad = depth - tokens.shape[1]
    return Proposal(tokens=mx.pad(tokens, [(0, 0), (0, pad)]), counts=proposal.counts)
