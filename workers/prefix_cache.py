"""Worker prefix cache: committed prompt KV, reused by later prompts that start the same way.

Keying: a hash chain of fixed-size token blocks (vLLM's automatic prefix caching), not a radix
tree. A block is keyed by (its parent block's id, its own `block_tokens` tokens), so a lookup
walks the prompt block by block through one dict and stops at the first miss; equal keys mean
equal token prefixes exactly (the key holds the tokens, nothing is trusted to a hash). Why
blocks and not a radix tree: the engine's ragged cache keeps each row contiguous, so a hit is a
*copy* into the joining row's slots; copies and LRU eviction at block granularity keep both the
bookkeeping and the copy O(blocks) with no node splitting, and the lost tail (< one block per
prompt) is small next to few-shot prefixes of hundreds of tokens. A radix tree would reuse that
tail too, at the price of splitting stored KV arrays on every divergence.

Storage: one entry per block, keys [L, H, bs, Dk] and values [L, H, bs, Dv] stacked over the
attention layers (each a list of parts: one array, or packed weights, scales and biases for a
quantized cache, kv_bits -- copied as stored, so a hit restores the exact quantized slots) (stacking copies, so an entry never pins the prefill cache it came from),
plus, where the prefill computed them, the target's hidden states [bs, Hd]: an MTP head reads a
prompt's last `prompt_window` positions, so a hit for it reaches into that window only through
blocks that carry them (a repeated prompt: its window's blocks were computed with them).

Budget: `capacity_tokens` of cached KV, separate from the running batch's KV budget: rows own
their slots, the cache only holds copies, so evicting never touches a running row and the cache
can never starve one. Least recently used blocks go first; a block's descendants go with it
(they are unreachable without it).

Refusals: models with recurrent (GatedDeltaNet) layers keep state that is not a per-token KV
and cannot be cut at a block boundary here; the cache turns itself off for them, logs why once,
and reports the reason (`disabled_reason`, exported as a metric label).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from workers import launch
from workers.kv_cache import BatchCache
from workers.kv_layers import slot_capacity

log = logging.getLogger(__name__)

DEFAULT_BLOCK_TOKENS = 32


@dataclass
class _Block:
    id: int
    key: tuple[int, tuple[int, ...]]  # (parent id, this block's tokens); parent 0 = the root
    keys: list[mx.array]  # parts, each [L, H, bs, *] (RaggedKVCache.key_parts)
    values: list[mx.array]  # parts, each [L, H, bs, *]
    hidden: mx.array | None = None  # [bs, Hd] target hidden (MTP), where the prefill had it
    children: set[int] = field(default_factory=set)


@dataclass
class PrefixCacheStats:
    """Counters since the last `take_stats` (vLLM semantics: queries and hits in tokens)."""

    queries: int = 0  # prompt tokens looked up
    hits: int = 0  # of those, tokens found cached (their prefill is skipped)
    evicted: int = 0  # tokens evicted to make room


class PrefixCache:
    def __init__(
        self,
        capacity_tokens: int,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        recurrent: Sequence[bool] = (),
    ):
        if block_tokens < 1:
            raise ValueError(f"block_tokens={block_tokens} is invalid: use an int >= 1")
        self.capacity_tokens = capacity_tokens
        self.block_tokens = block_tokens
        self.disabled_reason: str | None = None
        if capacity_tokens < block_tokens:
            self.disabled_reason = "off" if capacity_tokens == 0 else "budget_below_one_block"
        elif any(recurrent):
            self.disabled_reason = "recurrent_layers"
            log.warning(
                "prefix cache off: the model has recurrent (GatedDeltaNet) layers, whose state "
                "this cache does not store per block; every prompt is prefilled in full"
            )
        self._by_key: dict[tuple[int, tuple[int, ...]], _Block] = {}
        self._lru: OrderedDict[int, _Block] = OrderedDict()  # oldest first
        self._next_id = 1
        self.stats = PrefixCacheStats()

    @property
    def enabled(self) -> bool:
        return self.disabled_reason is None

    @property
    def used_tokens(self) -> int:
        return len(self._lru) * self.block_tokens

    def clear(self) -> None:
        """Drop every cached block (an engine's warm-up prompts are nobody's prefix)."""
        self._by_key.clear()
        self._lru.clear()
        self.stats = PrefixCacheStats()

    def take_stats(self) -> PrefixCacheStats:
        stats, self.stats = self.stats, PrefixCacheStats()
        return stats

    # -- lookup -----------------------------------------------------------------------------
    def first_block(self, tokens: Sequence[int]) -> tuple[int, ...] | None:
        """The first full block of `tokens` (what placement and joiners group by), if any."""
        if not self.enabled or len(tokens) < self.block_tokens:
            return None
        return tuple(tokens[: self.block_tokens])

    def is_cached(self, first: tuple[int, ...]) -> bool:
        return (0, first) in self._by_key

    def lookup(
        self, tokens: Sequence[int], num_prompt: int, hidden_from: int | None = None
    ) -> list[_Block]:
        """The longest chain of cached full blocks that `tokens` starts with (most recently
        used from now on); with `hidden_from`, blocks past that position must carry their
        hidden (MTP). `num_prompt` tokens are counted as queried."""
        if not self.enabled:
            return []
        chain = self._walk(tokens)
        if hidden_from is not None:
            bs = self.block_tokens
            ok = [(i + 1) * bs <= hidden_from or b.hidden is not None for i, b in enumerate(chain)]
            chain = chain[: ok.index(False)] if False in ok else chain
        for b in reversed(chain):  # the root ends most recent: leaves are evicted first
            self._lru.move_to_end(b.id)
        self.stats.queries += num_prompt
        self.stats.hits += len(chain) * self.block_tokens
        return chain

    def _walk(self, tokens: Sequence[int]) -> list[_Block]:
        bs, parent, chain = self.block_tokens, 0, []
        for start in range(0, len(tokens) - bs + 1, bs):
            block = self._by_key.get((parent, tuple(tokens[start : start + bs])))
            if block is None:
                break
            chain.append(block)
            parent = block.id
        return chain

    # -- hit: cached KV into a fresh prefill cache --------------------------------------------
    def fill(self, cache: BatchCache, chains: Sequence[Sequence[_Block]]) -> np.ndarray:
        """Write each row's cached blocks into slots [0, n_r) of `cache` (a fresh prefill cache
        of len(chains) rows) and set its lengths; returns n_r [B], tokens taken per row."""
        bs = self.block_tokens
        cached = np.array([len(c) * bs for c in chains], dtype=np.int64)
        if not cached.any():
            return cached
        some = next(c[0] for c in chains if c)
        cap = slot_capacity(int(cached.max()))

        def rows_of(part: int, side: str) -> mx.array:  # [L, B, H, cap, *]
            rows = []
            for chain, n in zip(chains, cached):
                if chain:  # [L, H, n, *] -> padded to [L, H, cap, *]
                    x = mx.concatenate([getattr(b, side)[part] for b in chain], axis=2)
                    rows.append(mx.pad(x, [(0, 0), (0, 0), (0, cap - int(n)), (0, 0)]))
                else:
                    L, H, _, D = getattr(some, side)[part].shape
                    rows.append(mx.zeros((L, H, cap, D), getattr(some, side)[part].dtype))
            return mx.stack(rows, axis=1)

        all_k = [rows_of(i, "keys") for i in range(len(some.keys))]
        all_v = [rows_of(i, "values") for i in range(len(some.values))]
        for i, layer in enumerate(self._attention_layers(cache)):
            layer.key_parts, layer.value_parts = [k[i] for k in all_k], [v[i] for v in all_v]
        cache.lengths = cached.copy()
        cache.lengths_mx = mx.array(cached.astype(np.int32))
        launch.evaluate_behind(all_k, all_v)  # queued behind a launcher's launch where routed
        return cached

    def hidden_of(self, chain: Sequence[_Block], start: int) -> mx.array | None:
        """[n - start, Hd] the cached hidden of positions [start, n) of a hit of n tokens
        (`lookup` with hidden_from <= start guarantees those blocks carry it); None if empty."""
        bs = self.block_tokens
        first = start // bs
        if first >= len(chain):
            return None
        hidden = [b.hidden for b in chain[first:]]
        if any(h is None for h in hidden):
            raise ValueError("hidden_of: a block past `start` has no hidden; look it up with it")
        return mx.concatenate(hidden, axis=0)[start - first * bs :]  # type: ignore[arg-type]

    # -- insert: a finished prefill's full blocks --------------------------------------------
    def insert(
        self,
        tokens: Sequence[int],
        cache: BatchCache,
        row: int,
        hidden: mx.array | None = None,
        hidden_start: int = 0,
    ) -> None:
        """Cache the full blocks of `tokens` (row `row` of `cache` holds them at slots
        [0, len(tokens))); `hidden` [m, Hd] is the row's target hidden at positions
        [hidden_start, hidden_start + m) (MTP): blocks it covers whole keep theirs."""
        if not self.enabled:
            return
        bs, parent = self.block_tokens, 0
        layers = self._attention_layers(cache)
        if not layers or not layers[0].key_parts:
            return
        shapes = {tuple(p.shape[1::2] for p in x.key_parts + x.value_parts) for x in layers}
        if len(shapes) > 1:
            self._refuse("layer_shapes", "attention layers differ in KV heads or head size")
            return
        pinned: set[int] = set()
        chain: list[int] = []
        new: list[_Block] = []
        for start in range(0, len(tokens) - bs + 1, bs):
            key = (parent, tuple(tokens[start : start + bs]))
            block = self._by_key.get(key)
            h = None
            if (
                hidden is not None
                and hidden_start <= start
                and start + bs <= hidden_start + len(hidden)
            ):
                h = hidden[start - hidden_start : start + bs - hidden_start]
            if block is not None and block.hidden is None and h is not None:
                block.hidden = mx.array(h)  # a copy: never pins the prefill's arrays
                new.append(block)
            if block is None:
                if not self._make_room(pinned):
                    break
                block = self._copy_block(key, layers, row, start, h)
                self._by_key[key] = block
                self._lru[block.id] = block
                if parent:
                    self._lru[parent].children.add(block.id)
                new.append(block)
            pinned.add(block.id)
            chain.append(block.id)
            parent = block.id
        for bid in reversed(chain):  # the root ends most recent, as in lookup
            self._lru.move_to_end(bid)
        # Launched, not waited for (a wait would also wait for the round in flight); queued
        # behind a launcher's launch where the step routes.
        launch.evaluate_behind(
            [a for b in new for a in (*b.keys, *b.values, b.hidden) if a is not None]
        )

    def _copy_block(
        self, key: tuple[int, tuple[int, ...]], layers: list, row: int, start: int,
        hidden: mx.array | None,
    ) -> _Block:  # fmt: skip
        end = start + self.block_tokens

        # mx.stack copies: the block owns its memory, not a view of the prefill cache.
        def stacked(side: str) -> list[mx.array]:  # parts, each [L, H, bs, *]
            n = len(getattr(layers[0], side))
            return [
                mx.stack([getattr(x, side)[i][row, :, start:end] for x in layers]) for i in range(n)
            ]

        keys, values = stacked("key_parts"), stacked("value_parts")
        h = None if hidden is None else mx.array(hidden)  # a copy, as the KV above
        block = _Block(self._next_id, key, keys, values, h)
        self._next_id += 1
        return block

    def _make_room(self, pinned: set[int]) -> bool:
        """Evict least recently used blocks (never `pinned` ones) until one more block fits."""
        while self.used_tokens + self.block_tokens > self.capacity_tokens:
            victim = next((b for b in self._lru.values() if b.id not in pinned), None)
            if victim is None:
                return False
            self._evict(victim)
        return True

    def _evict(self, block: _Block) -> None:
        for child in list(block.children):
            if child in self._lru:
                self._evict(self._lru[child])
        parent = self._lru.get(block.key[0])
        if parent is not None:
            parent.children.discard(block.id)
        del self._by_key[block.key]
        del self._lru[block.id]
        self.stats.evicted += self.block_tokens

    def _attention_layers(self, cache: BatchCache) -> list:
        return [x for x, rec in zip(cache.layers, cache.recurrent) if not rec]

    def _refuse(self, reason: str, why: str) -> None:
        self.disabled_reason = reason
        self._by_key.clear()
        self._lru.clear()
        log.warning("prefix cache off: %s; every prompt is prefilled in full", why)
