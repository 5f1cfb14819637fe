"""A prefill in progress: joining rows whose prompts enter a cache of their own, chunk by
chunk, between rounds (workers/engine.py `_admit`), then join the running batch."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from workers.backend import Backend
from workers.forward import prefill_chunk
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant
from workers.language_model import LanguageModel
from workers.prefix_cache import PrefixCache
from workers.rows import Row
from workers.types import RoundStats

# A window cut pays from this many skipped tokens (rows x positions before the window) on
# the 2-core CPU VM, in turns (bench/results/s48/prefill_cut_cpu.py): one 150-token prompt
# (86 skipped) went 4.4 ms faster to its first token whole, 7.3 ms a 64-token request; 16
# prompts at once (~1,400 skipped) read level to the first token and 5% faster cut over 32.
CUT_MIN_SKIPPED = 1024


@dataclass
class Prefill:
    rows: list[Row]
    cache: BatchCache
    done: int = 0  # tokens of each row's uncached remainder already in `cache`
    # MTP: each row's last `tail` prompt positions need the target's hidden (its head takes
    # that many pairs). The prefill computes it from `align`-aligned starts (prefix-cache
    # blocks: so a repeat of the prompt finds its window's hidden cached) and keeps none
    # before `hidden_from` (of the remainder). With `cut_at_window` a chunk that spans
    # hidden_from is cut there, so the positions before it evaluate only the cache (lazily,
    # the last layer's attention and MLP never run for them: ~8% of the default model's
    # prefill on the CPU). Where each forward's launches cost more than that compute (MLX
    # CUDA: a second forward and a second padded shape per join), it is not cut and the
    # hidden before hidden_from is dropped. Nor where the cut would skip fewer than
    # CUT_MIN_SKIPPED tokens: the second forward's own cost (its ~1,600 nodes' graph and
    # dispatch) is then more than the skipped work.
    tail: int = 0
    align: int = 1
    hidden_from: int = 0
    cut_at_window: bool = True
    hidden: list[mx.array] = field(default_factory=list)  # per chunk from hidden_from [n, W, H]
    # [n] leading history tokens each row took from the prefix cache (prefill skips them)
    cached: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # per row: the cached hidden of its window's cached positions [c_r - window_r, H], or None
    cached_hidden: list[mx.array | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.cached) != len(self.rows):  # no prefix cache hits given: none
            self.cached = np.zeros(len(self.rows), dtype=np.int64)
        if len(self.cached_hidden) != len(self.rows):
            self.cached_hidden = [None] * len(self.rows)
        if self.tail:
            self.hidden_from = int(np.maximum(self.hidden_start() - self.cached, 0).min())

    def window(self) -> np.ndarray:
        """[n] absolute position of each row's first pair hidden (the head's window)."""
        return np.array([max(0, len(r.history) - 1 - self.tail) for r in self.rows])

    def hidden_start(self) -> np.ndarray:
        """[n] where each row's computed hidden starts: its window, block-aligned."""
        return self.window() // self.align * self.align

    def remainders(self) -> list[list[int]]:
        return [r.history[c:-1] for r, c in zip(self.rows, self.cached.tolist())]

    def advance(self, model: LanguageModel, step: int, post_norm: bool, one_chunk: bool) -> bool:
        """Prefill the next chunk (`one_chunk`: other rows are decoding) or all that is left;
        True once every row's uncached history but its last token is in the cache (the next
        verify consumes that one)."""
        seqs = self.remainders()
        longest = max(len(s) for s in seqs)
        while self.done < longest:
            end = min(self.done + step, longest)
            want = bool(self.tail) and end > self.hidden_from
            skipped = (self.hidden_from - self.done) * len(seqs)  # tokens the cut would skip
            if want and skipped > 0 and self.cut_at_window and skipped >= CUT_MIN_SKIPPED:
                end, want = self.hidden_from, False  # no hidden before hidden_from
            h = prefill_chunk(model, self.cache, seqs, self.done, end - self.done, want, post_norm)
            if h is not None:
                self.hidden.append(h[:, max(0, self.hidden_from - self.done) :])
            self.done = end
            if one_chunk:
                break
        return self.done >= longest

    def row_hidden(self, i: int) -> tuple[mx.array | None, int]:
        """Row i's computed hidden [m, H] and the absolute position of its first entry."""
        if not self.hidden:
            return None, 0
        if len(self.hidden) > 1:  # once for all rows: prompt_hidden and the inserts read it
            self.hidden = [mx.concatenate(self.hidden, axis=1)]
        n = len(self.rows[i].history) - 1 - int(self.cached[i])  # the row's remainder
        h = self.hidden[0][i, : max(0, n - self.hidden_from)]
        return h, int(self.cached[i]) + self.hidden_from


def prompt_hidden(p: Prefill) -> mx.array | None:
    """[n, P, H] each row's target hidden at its window (its last min(tail, len - 1) prompt
    positions, the pairs its MTP head takes): cached part, then computed; left-aligned and
    right-padded. None without any."""
    if not p.tail:
        return None
    parts = []
    for i, w in enumerate(p.window().tolist()):
        h, start = p.row_hidden(i)  # absolute positions start ..
        row = [x for x in (p.cached_hidden[i],) if x is not None]  # positions w .. c
        if h is not None:
            row.append(h[max(0, w - start) :])
        parts.append(mx.concatenate(row, axis=0) if row else None)
    some = next((x for x in parts if x is not None and x.shape[0]), None)
    if some is None:
        return None
    width = max(x.shape[0] for x in parts if x is not None)
    return mx.stack([
        mx.zeros((width, some.shape[1]), some.dtype) if x is None
        else mx.pad(x, [(0, width - x.shape[0]), (0, 0)])
        for x in parts
    ])  # fmt: skip


def fits_kv(used: int, need: int, kv_budget: int, batch_empty: bool = False) -> bool:
    """Whether a row reserving `need` KV tokens joins rows reserving `used`: within the budget,
    or alone (a batch always takes its first row; its cache grows past the budget)."""
    return used + need <= kv_budget or batch_empty


def pick_joining(
    waiting: deque[Row],
    rows: list[Row],
    reserve: Callable[[Row], int],
    kv_budget: int,
    max_batch_size: int,
    prefix_cache: PrefixCache,
    group_lengths: bool = True,
) -> list[Row]:
    """Waiting rows that fit, in order, and with `group_lengths` of similar lengths
    (`similar_lengths`: the rest wait for the next prefill). With the prefix cache on, a row whose first block is not
    cached yet waits one prefill behind another joiner starting the same way: that one's
    prefill fills the cache, so the rest prefill only their own tails."""
    joining: list[Row] = []
    deferred: list[Row] = []
    claimed: set[tuple[int, ...]] = set()  # uncached first blocks a joiner will fill
    used = sum(reserve(r) for r in rows)
    while waiting and len(rows) + len(joining) < max_batch_size:
        need = reserve(waiting[0])
        if not fits_kv(used, need, kv_budget, batch_empty=not (rows or joining)):
            break
        row = waiting.popleft()
        first = prefix_cache.first_block(row.history[:-1])
        if first is not None and not prefix_cache.is_cached(first):
            if first in claimed and len(deferred) < 4 * max_batch_size:
                deferred.append(row)  # `joining` is not empty: nothing starves
                continue
            claimed.add(first)
        used += need
        joining.append(row)
    waiting.extendleft(reversed(deferred))
    group = similar_lengths(joining) if group_lengths else joining
    if len(group) < len(joining):  # the rest prefill next, as their own group
        waiting.extendleft(reversed([r for r in joining if r not in group]))
    return group


# A prefill batch pads every row to its longest: a group may hold at most this many padded
# tokens per real one, plus PAD_SLACK per row (so short prompts still batch). The 16 held-out
# prompts of the default model (72-198 tokens) prefill in 1.38 s as one batch (49% padding)
# and 1.04 s in three groups, or one row at a time (2-core CPU, BLIS). Not where each new
# shape is a graph build (workers/backend.py).
PAD_RATIO, PAD_SLACK = 1.15, 8


def similar_lengths(rows: list[Row]) -> list[Row]:
    """The first row (the oldest) and the rows whose lengths pad little beside it, in order."""
    if len(rows) <= 1:
        return rows
    length = {id(r): len(r.history) - 1 for r in rows}
    head = length[id(rows[0])]
    group = [rows[0]]
    for r in sorted(rows[1:], key=lambda r: abs(length[id(r)] - head)):
        sizes = [length[id(x)] for x in (*group, r)]
        if len(sizes) * max(sizes) <= PAD_RATIO * sum(sizes) + PAD_SLACK * len(sizes):
            group.append(r)
    chosen = {id(r) for r in group}
    return [r for r in rows if id(r) in chosen]


def start_prefill(
    model: LanguageModel,
    quant: KVQuant | None,
    prefix_cache: PrefixCache,
    joining: list[Row],
    tail: int,
    stats: RoundStats,
) -> Prefill:
    """A prefill cache for the joining rows, holding whatever prefix of each prompt the
    prefix cache has (copied, no forward over it). With an MTP `tail`, a hit reaches into a
    prompt's window only through blocks that carry their hidden (the prefill computes the
    rest)."""
    cache = BatchCache.for_model(model, len(joining), quant)
    align = prefix_cache.block_tokens if prefix_cache.enabled else 1
    cut = not Backend.current().builds_per_shape
    job = Prefill(joining, cache, tail=tail, align=align, cut_at_window=cut)
    starts = job.hidden_start().tolist() if tail else [None] * len(joining)
    chains = [
        prefix_cache.lookup(r.history[:-1], r.prompt_len, hidden_from=h)
        for r, h in zip(joining, starts)
    ]
    cached = prefix_cache.fill(cache, chains)
    for r, c in zip(joining, cached.tolist()):
        r.num_cached_tokens = c
    counts = prefix_cache.take_stats()
    stats.num_prefix_queried_tokens, stats.num_prefix_hit_tokens = counts.queries, counts.hits
    stats.num_prefix_evicted_tokens = counts.evicted
    hidden = [
        prefix_cache.hidden_of(chain, w) if tail else None
        for chain, w in zip(chains, job.window().tolist())
    ]
    return Prefill(joining, cache, tail=tail, align=align, cut_at_window=cut, cached=cached,
                   cached_hidden=hidden)  # fmt: skip
