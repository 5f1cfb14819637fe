"""train_default's --stage draft / --stage mtp retrain one stage against a saved target, from an
exported corpus (the GPU box's way), and record it in train_summary.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx_lm
import numpy as np

from train import artifacts, corpus
from train.train_default import Corpus, main
from workers.mtp.loader import load_mtp_head

DEFAULT_TARGET = Path(__file__).resolve().parents[2] / "workers" / "default_model" / "target"


def tiny_model_dir(tmp_path: Path) -> Path:
    out = tmp_path / "model"
    cfg = artifacts.qwen3_config(
        vocab=2048, hidden=64, layers=2, heads=1, kv_heads=1, inter=128, ctx=256
    )
    artifacts.save_model_dir(out / "target", artifacts.build_qwen3(cfg), cfg, None)
    for name in artifacts.TOKENIZER_FILES:
        shutil.copy(DEFAULT_TARGET / name, out / "target" / name)
    summary = {
        "config": {"draft_steps": 0, "mtp_steps": 0},
        "final_loss": {"draft": 0.0, "mtp": 0.0},
        "wall_time_s": {"draft_s": 0.0, "mtp_s": 0.0, "total_s": 0.0},
    }
    (out / "train_summary.json").write_text(json.dumps(summary))
    rng = np.random.default_rng(0)
    stream = rng.integers(1, 2048, size=5000).astype(np.int32)
    Corpus(stream, stream[:1000], "test", 1, ["x.py"]).save(tmp_path / "corpus.npz")
    return out


def test_stage_draft_and_mtp_from_an_exported_corpus(tmp_path, monkeypatch):
    def no_stdlib(**_):
        raise AssertionError("--corpus given: the stdlib must not be read")

    monkeypatch.setattr(corpus, "list_sources", no_stdlib)
    out = tiny_model_dir(tmp_path)
    common = ["--out", str(out), "--corpus", str(tmp_path / "corpus.npz"), "--seq-len", "32"]
    main(["--stage", "draft", *common, "--draft-steps", "3", "--draft-batch", "2"]
         + ["--draft-hidden", "64", "--draft-layers", "1", "--draft-inter", "128"])  # fmt: skip
    main(["--stage", "mtp", *common, "--mtp-steps", "2", "--mtp-batch", "2", "--mtp-depth", "2"])
    draft, tokenizer = mlx_lm.load(str(out / "draft"))  # weights, config and the tokenizer
    assert draft.args.hidden_size == 64 and tokenizer.eos_token_id == 0
    assert (out / "target" / "mtp.safetensors").exists()
    head = load_mtp_head(out / "target")  # config.json declares the head, read as trained
    assert head.args.num_layers == 1 and head.args.hidden_norm == "pre_norm"
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["config"]["draft_steps"] == 3 and summary["config"]["mtp_steps"] == 2
    assert summary["final_loss"]["draft"] > 0 and summary["final_loss"]["mtp"] > 0
    assert summary["wall_time_s"]["total_s"] > 0
