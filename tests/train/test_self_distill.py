"""train/self_distill: the target's batched greedy continuations equal mlx-lm's one-row greedy
decode; batches mix them with corpus windows as asked; a round continues a saved head and is
appended to train_summary.json without touching the first stage's record."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from tests.train.test_retrain_stages import DEFAULT_TARGET, tiny_model_dir
from train.eval_default import greedy_continuations
from train.self_distill import DistillConfig, continuations, main, mixed_batches
from train.train_default import main as train_main
from workers.mtp.loader import read_mtp_weights


def test_batched_continuations_equal_one_row_greedy_decode():
    from mlx_lm import load

    target = load(str(DEFAULT_TARGET))[0]
    target.set_dtype(mx.float32)
    stream = np.random.default_rng(3).integers(1, 2048, size=4000).astype(np.int32)
    dcfg = DistillConfig(sequences=5, prompt_len=24, new_len=20, gen_batch=2)  # a ragged last batch
    rows = continuations(target, stream, dcfg, seed=11)
    assert rows.shape == (5, 44) and rows.dtype == np.int32
    prompts = [[int(t) for t in r[:24]] for r in rows]
    assert all(any(np.array_equal(r[:24], stream[s : s + 24]) for s in range(4000)) for r in rows)
    reference = greedy_continuations(target, prompts, 20)  # mlx-lm's KV cache, one row at a time
    assert [[int(t) for t in r] for r in rows] == reference


def test_mixed_batches_take_generated_rows_then_corpus_windows():
    generated = np.arange(10 * 9, dtype=np.int32).reshape(10, 9) + 10_000
    stream = np.arange(500, dtype=np.int32)
    batch = next(mixed_batches(generated, stream, batch=4, share=0.5, seed=0))
    assert batch.shape == (4, 9)
    assert all(any(np.array_equal(r, g) for g in generated) for r in batch[:2])
    for r in batch[2:]:  # consecutive corpus tokens
        assert r[0] < 500 and np.array_equal(r, np.arange(r[0], r[0] + 9))
    only = next(mixed_batches(generated, stream, batch=3, share=1.0, seed=0))
    assert (only >= 10_000).all()


def test_rounds_continue_the_saved_head_and_are_recorded(tmp_path):
    out = tiny_model_dir(tmp_path)
    corpus = str(tmp_path / "corpus.npz")
    train_main(["--stage", "mtp", "--out", str(out), "--corpus", corpus, "--seq-len", "32",
                "--mtp-steps", "2", "--mtp-batch", "2", "--mtp-depth", "2"])  # fmt: skip
    first = {k: np.array(v) for k, v in read_mtp_weights(out / "target").items()}
    summary_before = json.loads((out / "train_summary.json").read_text())
    generated = tmp_path / "gen.npy"
    args = ["--out", str(out), "--corpus", corpus, "--generated", str(generated),
            "--sequences", "6", "--prompt-len", "16", "--new-len", "17", "--gen-batch", "4",
            "--mtp-steps", "2", "--mtp-batch", "3", "--mtp-depth", "2", "--share", "0.67"]  # fmt: skip
    main(args)
    assert np.load(generated).shape == (6, 33)
    after = read_mtp_weights(out / "target")
    assert set(after) == set(first)
    assert any(not np.array_equal(np.array(after[k]), first[k]) for k in first)
    main([*args, "--seed", "1"])  # a second round reads the same continuations
    summary = json.loads((out / "train_summary.json").read_text())
    rounds = summary["mtp_self_distill"]
    assert [r["seed"] for r in rounds] == [0, 1]
    assert (
        rounds[0]["sequences"] == 6 and rounds[0]["share"] == 0.67 and rounds[0]["mtp_steps"] == 2
    )
    assert all(r["final_loss"] > 0 for r in rounds)
    assert summary["config"] == summary_before["config"]  # the first stage's record stays
    assert summary["final_loss"] == summary_before["final_loss"]
    with pytest.raises(ValueError, match=r"gen\.npy holds \(6, 33\) rows, not \(6, 41\)"):
        main([*args, "--new-len", "25"])
