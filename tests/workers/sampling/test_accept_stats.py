"""Statistical tests: speculative sampling reproduces the target's own distribution.

A synthetic autoregressive target (first-order Markov: the next-token distribution depends on
the previous token) with a small vocabulary lets us compute the exact per-position marginals of
non-speculative sampling. A deliberately different drafter proposes K tokens per round; 5,000
trajectories run as 5,000 batch rows (each its own seed, ragged after the first round), through
the real keys and accept functions. A per-position chi-square test against the exact marginals
must pass for rejection_accept and must fail for the variant of docs/field-failures.md,
seed 003 (resample from p).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np
import pytest
from scipy import stats

from workers.accept import coupled_accept, emitted_tokens, rejection_accept
from workers.sampling.keys import (
    STREAM_ACCEPT,
    STREAM_DRAFT,
    STREAM_TARGET,
    gumbel_noise,
    uniform_noise,
)

V = 6
DEPTH = 6  # tokens per trajectory checked
K = 4  # max drafts per round
N = 5000
PROMPT_LEN = 7
FIRST = 2  # last prompt token

rng = np.random.default_rng(1234)
TARGET = rng.dirichlet(np.full(V, 0.8), size=V)  # [prev, next]
# The drafter: sharper and mostly wrong about which token is likely (TV ~ 0.5 per row).
DRAFT = rng.dirichlet(np.full(V, 0.3), size=V)


def seed003_accept(draft_tokens, num_drafts, q, p, uniforms, gumbel):
    """The variant of docs/field-failures.md, seed 003: accept with min(1, p/q) but resample
    from p after a rejection."""
    B, Kd = draft_tokens.shape
    n, _ = rejection_accept(draft_tokens, num_drafts, q, p, uniforms, gumbel)
    log_p = mx.where(p > 0, mx.log(mx.maximum(p, 1e-38)), -mx.inf)
    target = mx.argmax(log_p + gumbel, axis=-1).astype(mx.int32)
    return n, emitted_tokens(draft_tokens, n, target)


def simulate(accept: Callable, point_mass: bool = False, coupled: bool = False) -> np.ndarray:
    """[N, DEPTH] trajectories, every row its own seed; rows drift apart in position."""
    seeds = list(range(10_000, 10_000 + N))
    out = [[] for _ in range(N)]
    last = np.full(N, FIRST)
    log_t, log_d = np.log(TARGET), np.log(np.maximum(DRAFT, 1e-30))
    while True:
        live = [b for b in range(N) if len(out[b]) < DEPTH]
        if not live:
            break
        s = [seeds[b] for b in live]
        start = [PROMPT_LEN + len(out[b]) for b in live]
        nd = np.array([min(1 + seeds[b] % K, DEPTH - len(out[b])) for b in live])  # ragged K
        B = len(live)
        # Draft K tokens per row, position by position.
        stream = STREAM_TARGET if coupled else STREAM_DRAFT
        g_draft = np.array(gumbel_noise(s, start, K, V, stream))  # [B, K, V]
        drafts = np.zeros((B, K), dtype=np.int32)
        q = np.zeros((B, K, V), dtype=np.float32)
        prev = last[live]
        for i in range(K):
            if point_mass:
                drafts[:, i] = (prev + 1) % V  # a deterministic "n-gram" guess
            else:
                q[:, i] = DRAFT[prev].astype(np.float32)
                drafts[:, i] = np.argmax(log_d[prev] + g_draft[:, i], axis=-1)
            prev = drafts[:, i]
        ctx = np.concatenate([last[live][:, None], drafts], axis=1)  # [B, K+1] slot i context
        p = TARGET[ctx].astype(np.float32)  # [B, K+1, V]
        g = gumbel_noise(s, start, K + 1, V, STREAM_TARGET)
        args = (mx.array(drafts), mx.array(nd.astype(np.int32)))
        if coupled:
            target = np.argmax(log_t[ctx] + np.array(g), axis=-1).astype(np.int32)
            n, emitted = accept(*args, mx.array(target))
        else:
            u = uniform_noise(s, start, K, STREAM_ACCEPT)
            n, emitted = accept(*args, None if point_mass else mx.array(q), mx.array(p), u, g)
        n, emitted = np.array(n), np.array(emitted)
        for j, b in enumerate(live):
            out[b].extend(emitted[j, : n[j] + 1].tolist())
            last[b] = out[b][-1]
    return np.array([row[:DEPTH] for row in out])


def plain_seeded(n_rows: int = N) -> np.ndarray:
    """Non-speculative seeded decoding with the same keys: [N, DEPTH]."""
    seeds = list(range(10_000, 10_000 + n_rows))
    g = np.array(gumbel_noise(seeds, [PROMPT_LEN] * n_rows, DEPTH, V, STREAM_TARGET))
    out = np.zeros((n_rows, DEPTH), dtype=np.int64)
    prev = np.full(n_rows, FIRST)
    for t in range(DEPTH):
        out[:, t] = np.argmax(np.log(TARGET[prev]) + g[:, t], axis=-1)
        prev = out[:, t]
    return out


def marginals() -> np.ndarray:
    """Exact [DEPTH, V] marginals of the target's own sampling from the prompt."""
    m = [TARGET[FIRST]]
    for _ in range(DEPTH - 1):
        m.append(m[-1] @ TARGET)
    return np.array(m)


def position_pvalues(traj: np.ndarray) -> list[float]:
    pvals = []
    for t, m in enumerate(marginals()):
        obs = np.bincount(traj[:, t], minlength=V).astype(float)
        exp = m * len(traj)
        rare = exp < 5  # bucket rare tokens so the chi-square approximation holds
        if rare.any():
            obs = np.append(obs[~rare], obs[rare].sum())
            exp = np.append(exp[~rare], exp[rare].sum())
        pvals.append(float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue))
    return pvals


def pair_pvalue(traj: np.ndarray) -> float:
    """Joint of the first two tokens (crosses a round boundary for rows with K=1)."""
    exp = (TARGET[FIRST][:, None] * TARGET).reshape(-1) * len(traj)
    obs = np.bincount(traj[:, 0] * V + traj[:, 1], minlength=V * V).astype(float)
    keep = exp >= 5
    obs = np.append(obs[keep], obs[~keep].sum())
    exp = np.append(exp[keep], exp[~keep].sum())
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.fixture(scope="module")
def drafter_tv() -> float:
    return float(0.5 * np.abs(TARGET - DRAFT).sum(axis=1).mean())


def test_rejection_sampling_matches_target_per_position(drafter_tv):
    assert drafter_tv > 0.3  # the drafter really is different
    traj = simulate(rejection_accept)
    pvals = position_pvalues(traj)
    assert min(pvals) > 0.01, pvals
    assert pair_pvalue(traj) > 0.01


def test_point_mass_drafter_matches_target_per_position():
    traj = simulate(rejection_accept, point_mass=True)
    pvals = position_pvalues(traj)
    assert min(pvals) > 0.01, pvals


def test_seed003_variant_fails_the_same_test():
    traj = simulate(seed003_accept)
    pvals = position_pvalues(traj)
    assert min(pvals) < 1e-6, pvals  # the test has teeth: resampling from p is detectably wrong


def test_plain_seeded_decoding_matches_target():
    assert min(position_pvalues(plain_seeded())) > 0.01


def test_coupled_is_token_identical_to_plain_seeded_decoding():
    np.testing.assert_array_equal(simulate(coupled_accept, coupled=True), plain_seeded())
