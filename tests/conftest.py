"""Shared fixtures: tiny random mlx-lm models and a tiny byte-level tokenizer, built in code."""

from __future__ import annotations

import pytest

from tests.tiny import make_tiny_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tiny_tokenizer()
