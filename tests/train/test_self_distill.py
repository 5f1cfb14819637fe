"""train/self_distill: the target's batched greedy continuations equal mlx-lm's one-row greedy
decode; batches mix them with corpus windows as asked; a round continues a saved head and is
appended to train_summary.json without touching the first stage's record."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from tests.train.test_retrain_stages import DEFAULT_TARGET, tiny_model_dir
from train import self_distill
from train.eval_default import greedy_continuations
from train.self_distill import DistillConfig, continuations, main, mixed_batches
from train.train_default import main as train_main
from workers.mtp.loader import read_mtp_weights


def test_batched_continuations_equal_one_row_greedy_decode():
    from mlx_lm import load

    # The shipped (trained) target: a random tiny model's near-tie logits could flip an argmax
    # between a batched and a one-row matmul, which is rounding, not a bug.
    target = load(str(DEFAULT_TARGET))[0]
    target.set_dtype(mx.float32)
    stream = np.random.default_rng(3).integers(1, 2048, size=4000).astype(np.int32)
    dcfg = DistillConfig(sequences=5, prompt_len=24, new_len=20, gen_batch=2)  # a ragged last batch
    rows = continuations(target, stream, dcfg, seed=11)
    assert rows.shape == (5, 44) and rows.dtype == np.int32
    starts = np.random.default_rng(11).integers(0, 4000 - 24, size=5)
    assert all(
        np.array_equal(r[:24], stream[s : s + 24]) for r, s in zip(rows, starts, strict=True)
    )
    reference = greedy_continuations(target, [[int(t) for t in r[:24]] for r in rows], 20)
    assert [[int(t) for t in r] for r in rows] == reference  # mlx-lm's KV cache, one row at a time


def test_mixed_batches_take_generated_rows_then_corpus_windows():
    generated = np.arange(10 * 9, dtype=np.int32).reshape(10, 9) + 10_000
    stream = np.arange(500, dtype=np.int32)
    batches = mixed_batches(generated, stream, batch=5, share=0.5, seed=0)
    seen = set()
    for batch in (next(batches) for _ in range(4)):
        assert batch.shape == (5, 9)
        assert all(any(np.array_equal(r, g) for g in generated) for r in batch[:3])  # 2.5 -> 3
        seen.update(int(r[0]) for r in batch[:3])
        for r in batch[3:]:  # consecutive corpus tokens
            assert r[0] < 500 and np.array_equal(r, np.arange(r[0], r[0] + 9))
    assert len(seen) > 3  # rows drawn anew per batch
    assert (next(mixed_batches(generated, stream, batch=3, share=1.0, seed=0)) >= 10_000).all()
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\]"):
        DistillConfig(share=0.0)


def test_rounds_continue_the_saved_head_and_are_recorded(tmp_path, monkeypatch):
    out = tiny_model_dir(tmp_path)
    corpus = str(tmp_path / "corpus.npz")
    train_main(["--stage", "mtp", "--out", str(out), "--corpus", corpus, "--seq-len", "32",
                "--mtp-steps", "2", "--mtp-batch", "2", "--mtp-depth", "2"])  # fmt: skip
    summary_path = out / "train_summary.json"
    summary_before = json.loads(summary_path.read_text())
    summary_before["config"]["weight_decay"] = 0.1  # the first stage's, which a round inherits
    summary_path.write_text(json.dumps(summary_before))
    first = {k: np.array(v) for k, v in read_mtp_weights(out / "target").items()}
    generated = tmp_path / "gen.npz"
    args = ["--out", str(out), "--corpus", corpus, "--generated", str(generated),
            "--sequences", "6", "--prompt-len", "16", "--new-len", "17", "--gen-batch", "4",
            "--mtp-steps", "2", "--mtp-batch", "3", "--mtp-depth", "2", "--share", "0.67"]  # fmt: skip
    main(args)
    assert np.load(generated)["rows"].shape == (6, 33)
    trained = {k: np.array(v) for k, v in read_mtp_weights(out / "target").items()}
    assert set(trained) == set(first)
    assert any(not np.array_equal(trained[k], first[k]) for k in first)

    def no_generation(*_a, **_k):
        raise AssertionError("the continuations in gen.npz must be read, not generated again")

    monkeypatch.setattr(self_distill, "continuations", no_generation)
    main([*args, "--mtp-lr", "0"])  # starts from the saved head: no step moves it
    after = read_mtp_weights(out / "target")
    assert all(np.array_equal(np.array(after[k]), trained[k]) for k in trained)
    summary = json.loads(summary_path.read_text())
    rounds = summary["mtp_self_distill"]
    assert [r["mtp_lr"] for r in rounds] == [0.002, 0.0]
    assert (
        rounds[0]["sequences"] == 6 and rounds[0]["share"] == 0.67 and rounds[0]["mtp_steps"] == 2
    )
    assert rounds[1]["generate_s"] == rounds[0]["generate_s"]  # the file's, not the read's
    assert all(r["weight_decay"] == 0.1 and r["final_loss"] >= 0 for r in rounds)
    assert summary["config"] == summary_before["config"]  # the first stage's record stays
    assert summary["final_loss"] == summary_before["final_loss"]
    with pytest.raises(ValueError, match=r"gen\.npz holds continuations of .*seed.: 4"):
        main([*args, "--seed", "1"])  # another seed's prompts are not in the file
    with pytest.raises(ValueError, match=r"name a \.npz file"):
        main([*args[:4], "--generated", str(tmp_path / "gen.npy"), *args[6:]])
    config = json.loads((out / "target" / "config.json").read_text())
    config["specfleet_mtp_hidden"] = "post_norm"
    (out / "target" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="reads the post_norm hidden"):
        main(args)
