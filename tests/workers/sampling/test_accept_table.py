"""Table tests of the sampled accept functions (pure arrays, hand-built distributions)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from workers.accept import coupled_accept, rejection_accept

V = 5


def one_hot_noise(B: int, W: int, choice: list[list[int]]) -> mx.array:
    """Gumbel stand-in that makes slot (b, i) pick choice[b][i] among the tokens with mass."""
    g = np.zeros((B, W, V), dtype=np.float32)
    for b in range(B):
        for i in range(W):
            g[b, i, choice[b][i]] = 50.0
    return mx.array(g)


def run(drafts, nd, q, p, u, g):
    n, out = rejection_accept(
        mx.array(np.asarray(drafts, dtype=np.int32)),
        mx.array(np.asarray(nd, dtype=np.int32)),
        None if q is None else mx.array(np.asarray(q, dtype=np.float32)),
        mx.array(np.asarray(p, dtype=np.float32)),
        mx.array(np.asarray(u, dtype=np.float32)),
        g,
    )
    return np.array(n).tolist(), np.array(out)


UNIF = [0.2] * V
PEAK = [0.6, 0.1, 0.1, 0.1, 0.1]


def test_all_accepted_then_bonus_from_last_slot():
    K = 3
    p = [[UNIF] * (K + 1)]
    n, out = run(
        [[0, 3, 2]], [K], [[UNIF] * K], p, [[0.999] * K], one_hot_noise(1, K + 1, [[1, 1, 1, 4]])
    )
    assert n == [3]
    assert out[0].tolist() == [0, 3, 2, 4]  # bonus picked by slot K's noise
    # A drafter over-weighting token 0: p(0)/q(0) = 1/3 < u = 0.9 rejects, and the residual
    # max(p - q, 0) has no mass on token 0, so the recovered token is never 0.
    q = [[PEAK] * K]
    n, out = run([[0, 0, 0]], [K], q, p, [[0.9] * K], one_hot_noise(1, K + 1, [[0, 0, 0, 0]]))
    assert n == [0] and out[0, 0] != 0


def test_first_rejected_emits_residual_sample():
    p = [[[0.5, 0.3, 0.2, 0.0, 0.0], UNIF, UNIF]]
    q = [[[0.2, 0.6, 0.2, 0.0, 0.0], UNIF]]
    # draft 1: p/q = 0.5; u = 0.9 rejects. residual = [0.3, 0, 0, 0, 0] -> token 0 whatever
    # the noise prefers among zero-mass tokens.
    n, out = run([[1, 2]], [2], q, p, [[0.9, 0.0]], one_hot_noise(1, 3, [[1, 0, 0]]))
    assert n == [0] and out[0, 0] == 0
    # u = 0.49 < 0.5 accepts the same draft.
    n, out = run([[1, 2]], [2], q, p, [[0.49, 0.0]], one_hot_noise(1, 3, [[1, 0, 3]]))
    assert n == [2] and out[0].tolist() == [1, 2, 3]


def test_last_rejected():
    K = 4
    p = [[UNIF] * K + [UNIF]]
    p[0][K - 1] = [0.0, 0.0, 0.0, 0.5, 0.5]
    q = [[UNIF] * (K - 1) + [[1.0, 0.0, 0.0, 0.0, 0.0]]]
    n, out = run([[1, 2, 3, 0]], [K], q, p, [[0.5] * K], one_hot_noise(1, K + 1, [[0, 0, 0, 4, 0]]))
    assert n == [3]
    assert out[0, :4].tolist() == [1, 2, 3, 4]


def test_q_zero_and_p_zero_edge_cases_do_not_nan():
    # Draft with q(x) = 0 (a drafter whose reported q disagrees with its pick): accept iff p(x) > 0.
    p = [[[0.0, 0.5, 0.5, 0.0, 0.0], UNIF], [[0.0, 0.5, 0.5, 0.0, 0.0], UNIF]]
    q = [[[1.0, 0.0, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0, 0.0]]]
    n, out = run([[1], [0]], [1, 1], q, p, [[0.99], [0.0]], one_hot_noise(2, 2, [[0, 3], [2, 0]]))
    assert n == [1, 0]
    assert out[0].tolist() == [1, 3]
    assert out[1, 0] == 2  # p(0) = q-less residual = p; noise picks token 2 among {1, 2}


def test_p_equals_q_always_accepts_and_empty_residual_is_safe():
    K = 6
    rng = np.random.default_rng(0)
    dist = rng.dirichlet(np.ones(V), size=K + 1).astype(np.float32)
    drafts = rng.integers(0, V, size=K)
    n, out = run(
        [drafts], [K], [dist[:K]], [dist], [[0.9999] * K], one_hot_noise(1, K + 1, [[2] * (K + 1)])
    )
    assert n == [K] and out[0].tolist() == drafts.tolist() + [2]
    # Forced rejection where the residual is empty (p <= q everywhere) falls back to p, no NaN.
    p = [[[0.0, 1.0, 0.0, 0.0, 0.0], UNIF]]
    q = [[[0.0, 1.0, 0.0, 0.0, 0.0]]]
    n, out = run([[0]], [1], q, p, [[0.5]], one_hot_noise(1, 2, [[3, 0]]))
    assert n == [0] and out[0, 0] == 1


def test_point_mass_drafter():
    p = [[[0.1, 0.6, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0], UNIF]]
    # u < p(x) accepts a point-mass draft: slot 0 accepts (0.5 < 0.6), slot 1 rejects (p(4) = 0)
    n, out = run([[1, 4]], [2], None, p, [[0.5, 0.0]], one_hot_noise(1, 3, [[0, 4, 0]]))
    assert n == [1] and out[0, :2].tolist() == [1, 3]
    # Rejected point-mass draft never re-emits the drafted token: residual = p with x zeroed.
    n, out = run([[1, 4]], [2], None, p, [[0.7, 0.0]], one_hot_noise(1, 3, [[1, 0, 0]]))
    assert n == [0] and out[0, 0] in (0, 2)


@pytest.mark.parametrize("K", [1, 16])
def test_depths_one_and_sixteen(K):
    rng = np.random.default_rng(K)
    B = 3
    p = rng.dirichlet(np.ones(V), size=(B, K + 1)).astype(np.float32)
    q = p[:, :K].copy()
    drafts = rng.integers(0, V, size=(B, K))
    reject_at = [0, K - 1, K]  # row 2 accepts everything
    u = np.full((B, K), 0.0, dtype=np.float32)
    for b, j in enumerate(reject_at):
        if j < K:
            p[b, j] = 0.0
            p[b, j, (drafts[b, j] + 1) % V] = 1.0  # p(x) = 0: certain rejection
    n, out = run(drafts, [K] * B, q, p, u, one_hot_noise(B, K + 1, [[0] * (K + 1)] * B))
    assert n == reject_at
    for b, j in enumerate(reject_at):
        assert out[b, :j].tolist() == drafts[b, :j].tolist()
        if j < K:
            assert out[b, j] == (drafts[b, j] + 1) % V


def test_rows_with_different_draft_counts():
    K = 4
    B = 4
    nd = [0, 1, 4, 2]
    p = np.full((B, K + 1, V), 0.2, dtype=np.float32)
    drafts = np.array([[-1, -1, -1, -1], [3, -1, -1, -1], [0, 1, 2, 3], [4, 4, -1, -1]])
    choice = [[b] * (K + 1) for b in range(B)]
    n, out = run(drafts, nd, p[:, :K], p, np.full((B, K), 0.5), one_hot_noise(B, K + 1, choice))
    assert n == nd  # p = q: every real draft passes, padding never counts
    for b in range(B):
        assert out[b, : nd[b]].tolist() == drafts[b, : nd[b]].tolist()
        assert out[b, nd[b]] == b  # bonus drawn at the slot after the row's own last draft


def test_coupled_accept_table():
    drafts = mx.array([[1, 2, 3], [1, 2, 3], [5, 5, 5], [0, 0, 0]])
    nd = mx.array([3, 3, 2, 0])
    target = mx.array([[1, 2, 3, 9], [1, 7, 3, 9], [5, 5, 6, 9], [4, 0, 0, 9]])
    n, out = coupled_accept(drafts, nd, target)
    assert np.array(n).tolist() == [3, 1, 2, 0]
    out = np.array(out)
    assert out[0].tolist() == [1, 2, 3, 9]
    assert out[1, :2].tolist() == [1, 7]
    assert out[2, :3].tolist() == [5, 5, 6]
    assert out[3, 0] == 4
