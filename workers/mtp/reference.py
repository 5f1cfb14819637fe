"""Single-row greedy speculative decoding with an MTP head: a slow, obvious reference.

It is the oracle for the batched engine's MTP drafter and shows the cache protocol in full:
    target cache: x_0..x_{n-1}; pending token x_n (not yet in the target cache); h_{n-1} known.
    MTP cache:    entries 0..n-2 (entry j = pair (h_j, x_{j+1})).
    round: chain K drafts from (h_{n-1}, x_n) -> verify [x_n, d_1..d_K] in one target forward ->
           accept the longest prefix equal to the target's argmax, emit the bonus token ->
           trim both caches to the committed prefix and re-feed the MTP with the true hiddens.
Rollback uses `KVCache.trim`, so this works for attention-only targets (not hybrid ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, make_prompt_cache

from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
from workers.mtp.qwen35 import MTPHead


@dataclass
class DecodeStats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [depth]


def _argmax(logits: mx.array) -> list[int]:
    return [int(t) for t in mx.argmax(logits, axis=-1).tolist()]  # type: ignore[union-attr, arg-type]


def mtp_greedy_decode(
    target: Any, mtp: MTPHead, prompt: list[int], max_tokens: int, depth: int
) -> tuple[list[int], DecodeStats]:
    """Greedy decode `max_tokens` new tokens (no EOS stop); returns (new tokens, stats)."""
    if not prompt or max_tokens <= 0 or depth <= 0:
        raise ValueError(
            f"need a prompt, max_tokens > 0 and depth > 0, got {len(prompt)}, {max_tokens}, {depth}"
        )
    tcache = make_prompt_cache(target)
    mcache = KVCache()
    x = mx.array([prompt])
    post = mtp.args.post_norm  # which target hidden the head was trained on
    h, logits = target_hidden_and_logits(target, x, tcache, post)
    if len(prompt) > 1:  # MTP entries 0..P-2: pairs (h_j, x_{j+1}) of the prompt
        mtp.step(h[:, :-1], embed(target, x[:, 1:]), cache=mcache)
    last_h = h[:, -1:]  # [1, 1, H] = h_{n-1}
    pending = _argmax(logits[0, -1:])[0]  # x_n
    out = [pending]
    stats = DecodeStats(accepted_per_pos=[0] * depth)
    while len(out) < max_tokens:
        k = min(depth, max_tokens - len(out))
        base = mcache.offset
        g, tok, drafts = last_h, pending, []
        for d in range(k):
            g, normed = mtp.step(g, embed(target, mx.array([[tok]])), cache=mcache, step_idx=d)
            tok = _argmax(lm_head(target, normed)[0, -1:])[0]
            drafts.append(tok)
        window = mx.array([[pending, *drafts]])  # [1, k+1]
        hv, lv = target_hidden_and_logits(target, window, tcache, post)
        greedy = _argmax(lv[0])  # greedy[j] = target's choice after window[: j + 1]
        a = 0
        while a < k and drafts[a] == greedy[a]:
            stats.accepted_per_pos[a] += 1
            a += 1
        stats.rounds += 1
        stats.drafted += k
        stats.accepted += a
        tcache_trim = k - a  # drop the rejected drafts' keys (window had k + 1 tokens)
        for c in tcache:
            c.trim(tcache_trim)
        mcache.trim(mcache.offset - base)  # drop all chained entries, re-feed true pairs below
        pair_h = mx.concatenate([last_h, hv[:, :a]], axis=1)  # h_{n-1}, h_n .. h_{n+a-1}
        pair_x = mx.array([[pending, *drafts[:a]]])  # x_n, d_1 .. d_a
        mtp.step(pair_h, embed(target, pair_x), cache=mcache)
        out.extend(drafts[:a])
        pending = greedy[a]
        last_h = hv[:, a : a + 1]
        out.append(pending)
    return out[:max_tokens], stats
