"""Positioned keys: a row's noise depends on (seed, position, stream) only."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from workers.sampling.keys import (
    STREAM_ACCEPT,
    STREAM_DRAFT,
    STREAM_TARGET,
    gumbel_noise,
    position_keys,
    uniform_noise,
)

V = 97


def test_row_noise_is_independent_of_batch_and_window():
    seeds = [0, 7, 2**62 + 5, 123456789]
    starts = [3, 40, 0, 1000]
    batch = np.array(gumbel_noise(seeds, starts, 5, V))  # [4, 5, V]
    for b, (s, t) in enumerate(zip(seeds, starts, strict=True)):
        alone = np.array(gumbel_noise([s], [t], 5, V))[0]
        np.testing.assert_array_equal(batch[b], alone)
        for i in range(5):  # slot i of a window == a width-1 window at start + i
            one = np.array(gumbel_noise([s], [t + i], 1, V))[0, 0]
            np.testing.assert_array_equal(batch[b, i], one)


def test_noise_differs_across_seed_position_stream():
    rows = [
        np.array(gumbel_noise([1], [10], 1, V, STREAM_TARGET))[0, 0],
        np.array(gumbel_noise([2], [10], 1, V, STREAM_TARGET))[0, 0],
        np.array(gumbel_noise([1], [11], 1, V, STREAM_TARGET))[0, 0],
        np.array(gumbel_noise([1], [10], 1, V, STREAM_DRAFT))[0, 0],
    ]
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            assert not np.allclose(rows[i], rows[j])
    u1 = np.array(uniform_noise([1, 1], [10, 10], 3, STREAM_ACCEPT))
    np.testing.assert_array_equal(u1[0], u1[1])
    assert len(set(u1[0].tolist())) == 3


def test_gumbel_statistics_and_categorical_equivalence():
    g = np.array(gumbel_noise(list(range(200)), [5] * 200, 4, V))
    euler = 0.5772156649
    assert abs(g.mean() - euler) < 0.02
    assert abs(g.std() - math.pi / math.sqrt(6)) < 0.03
    # argmax(logits + gumbel(k)) is MLX's categorical(logits, key=k) for the keys we derive.
    keys = position_keys([3, 9], np.array([[0, 1], [7, 8]]), STREAM_TARGET)
    logits = mx.random.normal((V,), key=mx.random.key(0))
    for key in keys.reshape(-1, 2):
        a = mx.argmax(logits + mx.random.gumbel((V,), key=key)).item()
        assert a == mx.random.categorical(logits, key=key).item()


def test_uniforms_in_unit_interval():
    u = np.array(uniform_noise(list(range(500)), list(range(500)), 8))
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.02


def test_bad_positions_rejected():
    with pytest.raises(ValueError, match="positions"):
        position_keys([1, 2], np.zeros((3, 1), dtype=np.int64), STREAM_TARGET)
    with pytest.raises(ValueError, match=">= 0"):
        position_keys([1], np.array([[-1]]), STREAM_TARGET)
