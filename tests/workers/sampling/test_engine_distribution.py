"""Rejection sampling through the real engine reproduces the target's own distribution.

A tiny 16-token target and a deliberately different draft model (TV distance ~0.5 at the
prompt); 5,000 seeded trajectories of 4 tokens from one prompt, as batch rows of the engine with
the model drafter at depth 3 (so rounds mix accepted drafts, recovered and bonus tokens). The
reference marginals are exact: every 3-token continuation is scored by one plain forward of the
target and chained. Per-position chi-square, p > 0.01 at every position.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
from scipy import stats

import workers.sampling.round as sampling_round
from tests.tiny import perturbed, tiny_model
from workers import Engine, ModelDrafter, SamplingParams
from workers.accept import emitted_tokens, rejection_accept
from workers.sampling.processors import BatchSampling, warp

V = 16
DEPTH = 4
N = 5000
PROMPT = [3, 7, 1]
PARAMS = dict(temperature=0.9, top_p=0.95, acceptance="rejection", ignore_eos=True)


@pytest.fixture(scope="module")
def models():
    target = tiny_model("llama", seed=5, vocab=V, layers=1)
    return target, perturbed(target, scale=0.6, seed=2)


def reference_marginals(target) -> np.ndarray:
    """[DEPTH, V] exact marginals of the target's own sampling (same warp as the engine)."""
    paths = np.array(list(itertools.product(range(V), repeat=DEPTH - 1)))  # [V^3, 3]
    tokens = np.concatenate([np.tile(PROMPT, (len(paths), 1)), paths], axis=1)
    logits = target(mx.array(tokens))[:, len(PROMPT) - 1 :]  # [V^3, DEPTH, V]
    bs = BatchSampling.from_params([SamplingParams(**PARAMS)] * len(paths), [0] * len(paths))
    probs = np.array(mx.softmax(warp(logits, bs), axis=-1), dtype=np.float64)
    joint = probs[0, 0]  # [V]: x1 (the same row for every path)
    for t in range(1, DEPTH):
        # p(x_{t+1} | x_1..x_t): the path prefix fixes the context, later path tokens don't matter.
        stride = V ** (DEPTH - 1 - t)
        cond = probs[::stride, t].reshape((V,) * t + (V,))
        joint = joint[..., None] * cond
    return np.array(
        [joint.sum(axis=tuple(a for a in range(DEPTH) if a != t)) for t in range(DEPTH)]
    )


def trajectories(target, draft) -> np.ndarray:
    """N seeded trajectories; `draft` a draft model or a drafter."""
    drafter = ModelDrafter(draft) if not hasattr(draft, "propose") else draft
    engine = Engine(target, drafter=drafter, max_batch_size=1000, draft_depth=3)
    params = [SamplingParams(max_tokens=DEPTH, seed=i, **PARAMS) for i in range(N)]
    outs = engine.generate([PROMPT] * N, params)
    stats_ = engine.take_round_stats()
    accepted = sum(s.num_accepted_tokens for s in stats_)
    assert 0 < accepted < sum(s.num_draft_tokens for s in stats_)
    return np.array([o.tokens for o in outs])


def position_pvalues(traj: np.ndarray, marg: np.ndarray) -> list[float]:
    pvals = []
    for t in range(DEPTH):
        obs = np.bincount(traj[:, t], minlength=V).astype(float)
        exp = marg[t] * len(traj)
        # Tokens top-p removed must never appear; then bucket rare tokens.
        assert obs[exp == 0].sum() == 0, f"position {t}: sampled a token the target excludes"
        obs, exp = obs[exp > 0], exp[exp > 0]
        rare = exp < 5
        if rare.any():
            obs = np.append(obs[~rare], obs[rare].sum())
            exp = np.append(exp[~rare], exp[rare].sum())
        pvals.append(float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue))
    return pvals


def test_engine_rejection_sampling_matches_target(models):
    target, draft = models
    marg = reference_marginals(target)
    assert np.allclose(marg.sum(axis=1), 1.0)
    p1 = np.array(mx.softmax(draft(mx.array([PROMPT]))[0, -1] / 0.9))
    assert 0.5 * np.abs(marg[0] - p1).sum() > 0.3  # the drafter really is different
    pvals = position_pvalues(trajectories(target, draft), marg)
    assert min(pvals) > 0.01, pvals


def test_host_mtp_head_rejection_sampling_matches_target():
    """The MTP head run on the host (workers/mtp/host_head.py) samples its drafts from its own
    distribution q and hands that q to rejection sampling: the outputs follow the target."""
    from tests.tiny import fit_mtp_head
    from workers.drafters.mtp_host import HostMTPDrafter

    target = tiny_model("qwen3", seed=5, vocab=V, layers=1)
    head = fit_mtp_head(target, steps=60)
    pvals = position_pvalues(trajectories(target, HostMTPDrafter(target, head)),
                             reference_marginals(target))  # fmt: skip
    assert min(pvals) > 0.01, pvals


def test_engine_with_seed003_resampling_fails(models, monkeypatch):
    """The same test catches the bug of docs/field-failures.md, seed 003 (resample from p
    after a rejection)."""

    def resample_from_p(draft_tokens, num_drafts, q, p, uniforms, gumbel):
        n, _ = rejection_accept(draft_tokens, num_drafts, q, p, uniforms, gumbel)
        log_p = mx.where(p > 0, mx.log(mx.maximum(p, 1e-38)), -mx.inf)
        return n, emitted_tokens(draft_tokens, n, mx.argmax(log_p + gumbel, axis=-1))

    monkeypatch.setattr(sampling_round, "rejection_accept", resample_from_p)
    target, draft = models
    pvals = position_pvalues(trajectories(target, draft), reference_marginals(target))
    assert min(pvals) < 1e-4, pvals
