"""Quantized ragged KV cache: what the slots hold, what a token costs, what admission fits,
and the errors bad settings give."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny import mixed_prompts, tiny_model
from tests.workers.engine.test_kv_quant_parity import tiny32
from workers import Engine, SamplingParams
from workers.config import EngineConfig
from workers.forward import forward_window, pad_windows, prefill
from workers.kv_cache import BatchCache
from workers.kv_quant import KVQuant
from workers.service.engine_spec import EngineSpec, add_engine_args

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def model():
    return tiny32("qwen3", seed=5)


def decoded_alone(model, tokens: list[int], quant: KVQuant | None) -> BatchCache:
    """A one-row cache fed `tokens` one at a time: what plain decoding writes."""
    cache = BatchCache.for_model(model, 1, quant)
    for t in tokens:
        prefill(model, cache, [[t]], step_size=1)
    return cache


def assert_rows_equal(cache: BatchCache, seqs: list[list[int]], model, quant) -> None:
    """Every committed slot of every row is bit-identical to plain decoding's slot."""
    for r, seq in enumerate(seqs):
        alone = decoded_alone(model, seq, quant)
        for li, (mine, ref) in enumerate(zip(cache.layers, alone.layers)):
            for part, (a, b) in enumerate(
                zip(mine.key_parts + mine.value_parts, ref.key_parts + ref.value_parts)
            ):
                got, want = np.array(a[r, :, : len(seq)]), np.array(b[0, :, : len(seq)])
                assert (got == want).all(), f"row {r} layer {li} part {part} differs"


@pytest.mark.parametrize("bits", [8, 4])
def test_committed_slots_equal_plain_decodings_after_rejects_and_rewrites(model, bits):
    """A verify window with mixed accepts, then a window that overwrites the rejected slots:
    each committed slot holds the packed key plain decoding would have written (the group of
    a slot never spans positions, so neighbours and window shape do not matter)."""
    quant = KVQuant(bits, 32)
    K, accepts = 4, [0, 4, 2, 1]
    prompts = mixed_prompts(4, seed=2, lengths=[3, 11, 6, 20])
    cache = BatchCache.for_model(model, 4, quant)
    prefill(model, cache, prompts, step_size=8)  # chunks of 8 across rows of other lengths
    rng = np.random.default_rng(0)
    drafts = [rng.integers(0, 256, size=K + 1).tolist() for _ in prompts]
    forward_window(model, cache, pad_windows(drafts)[0], np.full(4, K + 1))
    cache.commit(np.array(accepts) + 1)
    again = [rng.integers(0, 256, size=2).tolist() for _ in prompts]
    forward_window(model, cache, pad_windows(again)[0], np.full(4, 2))
    cache.commit(np.full(4, 2))
    committed = [p + d[: a + 1] + g for p, d, a, g in zip(prompts, drafts, accepts, again)]
    assert cache.lengths.tolist() == [len(c) for c in committed]
    assert_rows_equal(cache, committed, model, quant)


def test_rollback_keep_rows_and_append_on_quantized_rows(model):
    quant = KVQuant(4, 32)
    prompts = mixed_prompts(3, seed=4, lengths=[5, 9, 2])
    cache = BatchCache.for_model(model, 3, quant)
    prefill(model, cache, prompts, step_size=512)
    # A draft model's rollback: forget 3 tokens of row 1, then write different ones there.
    cache.rollback(np.array([0, 3, 0]))
    prefill(model, cache, [[], [40, 41], []], step_size=512)
    joiner = BatchCache.for_model(model, 1, quant)
    prefill(model, joiner, [[7, 8, 9, 10]], step_size=512)
    cache.keep_rows([1, 2])
    cache.append(joiner)
    seqs = [prompts[1][:-3] + [40, 41], prompts[2], [7, 8, 9, 10]]
    assert cache.lengths.tolist() == [len(s) for s in seqs]
    assert_rows_equal(cache, seqs, model, quant)
    with pytest.raises(AssertionError):  # caches of different kv_bits never mix
        cache.append(BatchCache.for_model(model, 1, KVQuant(8, 32)))


@pytest.mark.parametrize("bits", [None, 8, 4])
def test_bytes_per_token_is_what_the_arrays_hold(model, bits):
    engine = Engine(model, max_batch_size=4, kv_bits=bits, kv_group_size=32)
    for i, prompt in enumerate(mixed_prompts(3, seed=1)):
        engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=8))
    for _ in range(3):  # prefill, then rounds: the rows are still running
        engine.step()
    assert engine.cache.num_rows == 3
    layers = engine.cache.layers
    rows, cap = layers[0].keys.shape[0], layers[0].keys.shape[2]  # type: ignore[attr-defined]
    slots = rows * cap  # the arrays' rows: the batch's, and any spare ones (cache_rows.py)
    held = sum(a.nbytes for a in engine.cache.state_arrays())
    assert held == engine.kv_bytes_per_token * slots
    numbers = 2 * 2 * 2 * 32  # layers x (k, v) x kv heads x head_dim
    # fp32: 4 bytes a number; quantized: bits/8, plus an fp32 scale and bias per 32 numbers.
    per_number = 4 if bits is None else bits / 8 + 2 * 4 / 32
    assert engine.kv_bytes_per_token == numbers * per_number
    # mlx-lm's fused float attention unless a layer has `bits`: only packed reads (GPU) do.
    assert not hasattr(layers[0], "bits")


@pytest.mark.parametrize(("bits", "group"), [(8, 32), (8, 64), (4, 32), (4, 64)])
def test_decode_equals_mx_dequantize(bits, group):
    x = mx.random.normal((2, 3, 5, 128)) * 3
    quant = KVQuant(bits, group)
    parts = quant.encode(x)
    want = mx.dequantize(*parts, group_size=group, bits=bits)
    assert (np.array(quant.decode(*parts)) == np.array(want)).all()
    assert float(mx.abs(want - x).max()) > 0  # it is lossy: the comparison is not vacuous


def test_admission_fits_more_rows_in_the_same_memory(model):
    """kv_budget_tokens is memory in unquantized tokens: 8-bit rows take 320 bytes a token
    instead of 1024 here, so 3.2x as many tokens (and rows) are admitted at once."""
    prompts = mixed_prompts(8, seed=3, lengths=[20] * 8)
    sp = SamplingParams(max_tokens=20)  # each row reserves 40 tokens
    widest = {}
    for bits in (None, 8):
        engine = Engine(
            model, max_batch_size=8, kv_budget_tokens=130, kv_bits=bits, kv_group_size=32
        )
        engine.generate(prompts, sp)
        widest[bits] = max(s.batch_size for s in engine.take_round_stats())
        assert engine.info().kv_budget_tokens == engine.kv_budget
    assert widest[None] == 3 and widest[8] == 8
    assert (
        Engine(model, kv_budget_tokens=130, kv_bits=8, kv_group_size=32).kv_budget
        == 130 * 1024 // 320
    )
    # A request larger than the unquantized budget fits the quantized one.
    long = SamplingParams(max_tokens=300)
    with pytest.raises(ValueError, match="exceeds the KV budget of 130 tokens"):
        Engine(model, kv_budget_tokens=130).add_request("a", [1, 2, 3], long)
    Engine(model, kv_budget_tokens=130, kv_bits=4, kv_group_size=32).add_request(
        "a", [1, 2, 3], long
    )


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("kv_bits", 3, r"use None \(unquantized\) or one of \[4, 8\]"),
        ("kv_bits", True, r"use None \(unquantized\) or one of \[4, 8\]"),
        ("kv_bits", "8", r"use None \(unquantized\) or one of \[4, 8\]"),
        ("kv_group_size", 16, r"use one of \[32, 64, 128\]"),
        ("kv_group_size", 48, r"use one of \[32, 64, 128\]"),
    ],
)
def test_config_errors_name_field_value_and_fix(field, value, fix):
    with pytest.raises(ValueError, match=rf"EngineConfig\.{field}={value!r} is invalid: {fix}"):
        EngineConfig(**{field: value})


def test_head_dim_errors_name_the_setting_and_the_fix(model):
    with pytest.raises(ValueError, match=r"kv_group_size=64 does not divide .* use one of \[32\]"):
        Engine(model, kv_bits=8, kv_group_size=64)
    small = tiny_model("llama", seed=1)  # head_dim 16: no mx.quantize group fits
    with pytest.raises(ValueError, match=r"kv_bits=4 needs head dims divisible by 32.*\[16\]"):
        Engine(small, kv_bits=4, kv_group_size=32)
    assert Engine(small).kv_quant is None  # unquantized, the same model is fine


def test_cli_flags_reach_the_engine_config():
    p = argparse.ArgumentParser()
    add_engine_args(p)
    spec = EngineSpec.from_args(p.parse_args(["--kv-bits", "4", "--kv-group-size", "32"]))
    assert (spec.config.kv_bits, spec.config.kv_group_size) == (4, 32)
    default = EngineSpec.from_args(p.parse_args([])).config
    assert (default.kv_bits, default.kv_group_size) == (None, 64)
    with pytest.raises(SystemExit):
        p.parse_args(["--kv-bits", "3"])


def test_kv_cache_and_hybrid_do_not_import_each_other():
    """Issue 13: the layer/owner protocol lives in workers/cache_types.py; hybrid needs nothing
    from kv_cache, and kv_cache imports hybrid at the top, not hidden inside functions."""

    def workers_imports(name: str) -> tuple[set[str], set[str]]:
        tree = ast.parse((ROOT / "workers" / name).read_text())
        top = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
        every = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        return {m for m in top if m.startswith("workers")}, {
            m for m in every if m.startswith("workers")
        }

    hybrid_top, hybrid_all = workers_imports("hybrid.py")
    cache_top, cache_all = workers_imports("kv_cache.py")
    # hybrid reads the protocol and the window recurrence (a leaf: mlx and mlx-lm only)
    assert hybrid_all == hybrid_top == {"workers.cache_types", "workers.gdn_recurrence"}
    assert cache_all == cache_top and "workers.hybrid" in cache_top
