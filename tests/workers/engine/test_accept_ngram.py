"""Table tests of the pure greedy accept walk and the n-gram lookup."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from workers.accept import emitted_tokens, greedy_accept
from workers.drafters.base import DraftRequest
from workers.drafters.ngram import NgramDrafter

CASES = [
    # drafts, num_drafts, target (K+1), expected accepted, expected emitted prefix
    ([5, 6, 7], 3, [5, 6, 7, 8], 3, [5, 6, 7, 8]),  # all accepted -> bonus
    ([5, 6, 7], 3, [9, 6, 7, 8], 0, [9]),  # first rejected
    ([5, 6, 7], 3, [5, 6, 1, 8], 2, [5, 6, 1]),  # last rejected
    ([5, 6, 7], 1, [5, 6, 7, 8], 1, [5, 6]),  # only one draft valid: stop at count
    ([5, 6, 7], 0, [4, 6, 7, 8], 0, [4]),  # no drafts: plain decode
    ([5, 9, 7], 3, [5, 6, 7, 8], 1, [5, 6]),  # later match after a mismatch never counts
]


@pytest.mark.parametrize("drafts,n,target,acc,emit", CASES)
def test_greedy_accept_table(drafts, n, target, acc, emit):
    num = greedy_accept(mx.array([drafts]), mx.array([n]), mx.array([target]))
    assert num.tolist() == [acc]
    out = emitted_tokens(mx.array([drafts]), num, mx.array([target]))
    assert out[0, : acc + 1].tolist() == emit


def test_greedy_accept_reads_only_its_own_row_and_position():
    """Rows with the same drafts but different targets get their own counts
    (docs/field-failures.md, seed 001)."""
    K = 16
    rng = np.random.default_rng(0)
    drafts = rng.integers(0, 50, size=(8, K))
    target = np.concatenate([drafts, rng.integers(0, 50, size=(8, 1))], axis=1)
    cut = np.array([0, 1, 2, 5, 8, 15, 16, 3])
    for r, c in enumerate(cut):
        if c < K:
            target[r, c] = 99  # first mismatch of row r at position c
    counts = np.array([K, K, K, K, K, K, K, 2])
    num = greedy_accept(mx.array(drafts), mx.array(counts), mx.array(target))
    assert num.tolist() == np.minimum(cut, counts).tolist()


def test_ngram_proposes_continuation_of_latest_match():
    d = NgramDrafter(max_ngram=3)
    history = [1, 2, 3, 4, 9, 9, 1, 2, 3, 7, 1, 2, 3]
    # Latest earlier "1 2 3" is followed by 7, then "1 2 3" again.
    assert d.lookup(np.array(history), 4).tolist() == [7, 1, 2, 3]
    assert d.lookup(np.array([5, 6, 8]), 3).tolist() == []
    # A loop continues past the end of the history into its own output.
    assert d.lookup(np.array([4, 5, 4, 5]), 5).tolist() == [4, 5, 4, 5, 4]
    prop = d.propose(DraftRequest(histories=[history, [5, 6, 8]], depths=np.array([2, 3])))
    assert prop.counts.tolist() == [2, 0]
    assert prop.tokens[0, :2].tolist() == [7, 1]
