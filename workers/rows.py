"""Per-request state in the running batch, and the emit step: stops, holds, finish reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workers.types import FinishReason, RequestOutput, RoundStats, SamplingParams

if TYPE_CHECKING:
    import numpy as np

    from workers.verify import Verdict


@dataclass
class Row:
    request_id: str
    params: SamplingParams
    prompt_len: int
    # Committed history: prompt + output. history[-1] is not in the target cache yet: it is the
    # first input of the next verify window.
    history: list[int]
    stop_ids: frozenset[int]  # EOS ids (unless ignore_eos) and params.stop_token_ids
    stop_seqs: tuple[tuple[int, ...], ...]  # multi-token stop sequences
    max_context: int
    arrival_s: float = 0.0
    seed: int = 0  # PRNG seed of every sampled draw (workers.sampling.keys)
    num_sent: int = 0  # output tokens already released in events
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    error: str | None = None
    finish_sent: bool = False  # the finished event went out

    def __post_init__(self) -> None:
        if self.params.num_resumed_tokens > self.prompt_len:
            raise ValueError(
                f"SamplingParams.num_resumed_tokens={self.params.num_resumed_tokens} is invalid "
                f"for a prompt of {self.prompt_len} tokens: pass at most the prompt length"
            )

    @property
    def output(self) -> list[int]:
        return self.history[self.prompt_len :]

    @property
    def num_generated(self) -> int:
        return len(self.history) - self.prompt_len

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def remaining(self) -> int:
        """Tokens this row may still emit (max_tokens and the context window both bound it)."""
        return min(
            self.params.max_tokens - self.num_generated, self.max_context - len(self.history)
        )

    def append(self, tokens: list[int], logprobs: list[float] | None = None) -> None:
        """Append verified tokens one by one; stop at the first stop condition.

        Tokens after a stop are dropped, never emitted, even though the target accepted them.
        """
        for i, tok in enumerate(tokens):
            if tok in self.stop_ids:
                self.finish_reason = "stop"
                return
            self.history.append(tok)
            if logprobs is not None:
                self.logprobs.append(logprobs[i])
            if self._ends_with_stop_seq():
                self.finish_reason = "stop"
                return
            if self.remaining <= 0:
                self.finish_reason = "length"
                return

    def _ends_with_stop_seq(self) -> bool:
        out = self.output
        for seq in self.stop_seqs:
            if len(out) >= len(seq) and tuple(out[-len(seq) :]) == seq:
                del self.history[len(self.history) - len(seq) :]
                del self.logprobs[max(0, len(self.logprobs) - len(seq)) :]
                return True
        return False

    def _held(self) -> int:
        """Trailing output tokens withheld because they could begin a stop sequence."""
        if self.is_finished or not self.stop_seqs:
            return 0
        out = self.output
        held = 0
        for seq in self.stop_seqs:
            for n in range(min(len(seq) - 1, len(out)), held, -1):
                if tuple(out[-n:]) == seq[:n]:
                    held = n
                    break
        return held

    def take_event(self) -> RequestOutput | None:
        """The tokens not yet released (minus held ones), or None if there is nothing new."""
        end = self.num_generated - self._held()
        new = self.output[self.num_sent : end]
        if not new and (not self.is_finished or self.finish_sent):
            return None
        new_lp = self.logprobs[self.num_sent : end] if self.params.logprobs else None
        self.num_sent = max(self.num_sent, end)
        self.finish_sent = self.is_finished
        return RequestOutput(
            request_id=self.request_id,
            new_tokens=list(new),
            finished=self.is_finished,
            finish_reason=self.finish_reason,
            error=self.error,
            new_logprobs=new_lp,
            num_prompt_tokens=self.prompt_len,
            num_generated_tokens=self.num_generated,
            num_draft_tokens=self.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens,
            num_cached_tokens=self.num_cached_tokens,
        )


def emit_round(rows: list[Row], counts: np.ndarray, verdict: Verdict, stats: RoundStats) -> None:
    """Append each row's verified tokens (stops applied) and count the round in `stats`.

    rows: the batch the round computed, in order; counts [B] drafts proposed per row."""
    K = verdict.tokens.shape[1] - 1
    stats.batch_size = len(rows)
    stats.draft_depth = int(counts.max(initial=0))
    stats.accepted_per_pos = [0] * K
    for i, row in enumerate(rows):
        n_draft, n_acc = int(counts[i]), int(verdict.num_accepted[i])
        if row.is_finished:  # left during a pipelined round: its slot is discarded
            stats.accepted_per_row.append(n_acc)
            continue
        row.num_draft_tokens += n_draft
        row.num_accepted_tokens += n_acc
        stats.num_drafts += n_draft > 0
        stats.num_draft_tokens += n_draft
        stats.num_accepted_tokens += n_acc
        stats.accepted_per_row.append(n_acc)
        for pos in range(n_acc):
            stats.accepted_per_pos[pos] += 1
        before = row.num_generated
        lp = None if verdict.logprobs is None else verdict.logprobs[i, : n_acc + 1].tolist()
        row.append(verdict.tokens[i, : n_acc + 1].tolist(), lp)
        stats.num_generated_tokens += max(0, row.num_generated - before)
