"""Pipelined rounds: what a launched round leaves on the device, and reading it back.

While every row is greedy (no penalties) and the drafter keeps its state on the device (MTP
head, none, or a host drafter the depth policy set to 0), the engine *launches* round N+1
before it *collects* round N (workers/pipelined_rounds.py `_pipelined_step`): everything N+1
needs from N (each row's accept count, its last token, the MTP pairs, the cache lengths) stays
on the device as lazy arrays, so building N+1 reads nothing back, and the host's emit, stop
checks and bookkeeping for N run while the device computes N+1 (`mx.async_eval`, as mlx-lm's
generate_step overlaps its steps). A row that finished in N is found one round late: its slot
in N+1 is computed, discarded, never emitted (two rounds late with EngineConfig.pipeline_depth
2, where N+2 is launched before N is read). Host cache lengths are upper bounds while a round
is in flight (BatchCache.commit_lazy) and are tightened from the rows' histories when it is read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from workers import launch
from workers.launch import Ticket
from workers.rows import Row
from workers.verify import Verdict


@dataclass
class Flight:
    """A pipelined round on the device that the host has not read yet."""

    rows: list[Row]  # the batch it computed, in order (rows may have left since)
    counts: np.ndarray  # [B] drafts proposed per row (host-known at launch)
    num_accepted: mx.array  # [B] int32
    tokens: mx.array  # [B, K+1] emitted tokens, row r's first num_accepted[r] + 1 valid
    last: mx.array  # [B] int32 each row's newest token: the next round's first input
    logprobs: mx.array | None  # [B, K+1]
    width: int  # K + 1: the most tokens a row can have committed
    # host seconds spent building and launching it, less any wait for the launch before it
    # (a hand-off to the launcher thread, workers/pipelined_rounds.py `_pipelined_step`)
    launch_s: float = 0.0
    wait_s: float = 0.0  # seconds waited for it before the next launch (CPU, Engine)
    # Launched from a launcher thread (workers/launch.py): its ticket, and the arrays the host
    # reads, each a node of its own: the next round's graph takes the originals as inputs, and
    # the launcher thread may be scheduling that graph while the host reads these.
    ticket: Ticket | None = None
    host: HostArrays | None = None

    def launch(self, copies: bool) -> None:
        """Start computing the round, through the launcher thread where the step routes.
        `copies` (an engine with a launcher, routed or not): the host reads copies, since a
        later round's launch from that thread may take the originals while they are read."""
        outs = self.host_arrays()
        if not copies:
            mx.async_eval(*[a for a in outs if a is not None])
            return
        lp = outs.logprobs
        self.host = HostArrays(
            mx.stop_gradient(outs.num_accepted), mx.stop_gradient(outs.tokens),
            mx.stop_gradient(outs.last), None if lp is None else mx.stop_gradient(lp),
        )  # fmt: skip
        self.ticket = launch.async_eval(*[a for a in (*outs, *self.host) if a is not None])

    def host_arrays(self) -> HostArrays:
        return HostArrays(self.num_accepted, self.tokens, self.last, self.logprobs)

    def _read(self, array: mx.array, dtype: type) -> np.ndarray:
        """A launched array on the host: after its ticket, a read only waits (launch.py)."""
        if self.ticket is not None:
            return self.ticket.read(array, dtype)
        return np.array(array, dtype=dtype)

    def wait(self) -> None:
        if self.host is None:
            mx.eval(self.num_accepted, self.tokens, self.last)
        else:
            self._read(self.host.last, np.int32)

    def read_back(self) -> Verdict:
        """Wait for the round and bring its outcome to the host."""
        host = self.host
        if host is None:
            host = self.host_arrays()
            mx.eval(*[a for a in (host.num_accepted, host.tokens, host.logprobs) if a is not None])
        lp = host.logprobs
        return Verdict(
            num_accepted=self._read(host.num_accepted, np.int64),
            tokens=self._read(host.tokens, np.int64),
            logprobs=None if lp is None else self._read(lp, np.float64),
        )


class HostArrays(NamedTuple):
    num_accepted: mx.array  # [B] int32
    tokens: mx.array  # [B, K+1]
    last: mx.array  # [B] int32
    logprobs: mx.array | None  # [B, K+1]


def last_tokens(rows: list[Row], prev: Flight | None) -> mx.array:
    """[B] each row's newest token: from the round in flight, or the host's history."""
    if (
        prev is not None
        and len(prev.rows) == len(rows)
        and all(a is b for a, b in zip(prev.rows, rows))
    ):
        return prev.last  # the same rows in the same order: no gather, no host array
    host = mx.array(np.array([r.history[-1] for r in rows], dtype=np.int32))
    if prev is None:
        return host
    at = {id(r): j for j, r in enumerate(prev.rows)}
    idx = np.array([at.get(id(r), -1) for r in rows], dtype=np.int32)
    if (idx < 0).all():
        return host
    from_flight = prev.last[mx.array(np.maximum(idx, 0))]
    return mx.where(mx.array(idx >= 0), from_flight, host)


def settle_before(prev: Flight | None, counts: np.ndarray) -> None:
    """On the CPU, finish the round in flight before launching one of another shape (`counts`
    [B]: the next round's drafts per row); record the wait on it.

    The CPU computes while launching: launching round N+1 runs N's tail (~100 dispatches ahead
    of the host), which a depth policy would charge to N+1. Between rounds of one shape the
    carried tails cancel out, so only a change of batch or depth waits, and each round's time
    stays its own (depth-3 MTP head at B=1: the policy's median round 13.3 ms with a wait
    before every launch, 11.8 ms without)."""
    if prev is None or (len(counts) == len(prev.counts) and np.array_equal(counts, prev.counts)):
        return
    t = time.perf_counter()
    prev.wait()
    prev.wait_s = time.perf_counter() - t
