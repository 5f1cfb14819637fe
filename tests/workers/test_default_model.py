"""The embedded default model: loads offline in a fresh process, is small, and drafts well."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest

from train import corpus
from train.eval_default import greedy_continuations, score_windows
from workers.mtp.loader import load_mtp_head

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "workers" / "default_model"
# Floors sit a little under the values measured by train/eval_default.py on the same 8 prompts
# (see workers/default_model/README.md); a broken MTP/draft path scores near 0.
MTP_DEPTH1_FLOOR = 0.65  # measured 0.750 (232 positions)
DRAFT_FLOOR = 0.62  # measured 0.746

pytestmark = pytest.mark.skipif(
    not (DEFAULT / "target" / "model.safetensors").is_file(), reason="default model not trained"
)

_LOADER = r"""
import json, sys
import mlx.core as mx, mlx_lm
from workers.mtp.loader import load_mtp_head
d = sys.argv[1]
target, tok = mlx_lm.load(d + "/target")
draft, dtok = mlx_lm.load(d + "/draft")
mtp = load_mtp_head(d + "/target")
text = "def add(a, b):\n    return a + b\n"
ids = tok.encode(text)
out = mlx_lm.generate(target, tok, prompt=ids, max_tokens=8, verbose=False)
print(json.dumps({
    "model_type": target.model_type, "draft_type": draft.model_type,
    "vocab": target.args.vocab_size, "draft_vocab": draft.args.vocab_size,
    "eos": sorted(tok.eos_token_ids), "draft_eos": sorted(dtok.eos_token_ids),
    "roundtrip": tok.decode(ids) == text, "same_ids": dtok.encode(text) == ids,
    "mtp_layers": len(mtp.layers), "generated": out,
}))
"""


def test_loads_offline_in_fresh_process() -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-c", _LOADER, str(DEFAULT)],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["model_type"] == info["draft_type"] == "qwen3"
    assert info["vocab"] == info["draft_vocab"]
    assert info["eos"] == info["draft_eos"] == [0]
    assert info["roundtrip"] and info["same_ids"]
    assert info["mtp_layers"] == 1
    assert isinstance(info["generated"], str) and info["generated"]


def test_shipped_files_are_small_fp16_and_in_mlx_lm_format() -> None:
    weights = sorted(DEFAULT.glob("*/*.safetensors"))
    assert {p.relative_to(DEFAULT).as_posix() for p in weights} == {
        "target/model.safetensors",
        "target/mtp.safetensors",
        "draft/model.safetensors",
    }
    assert sum(p.stat().st_size for p in weights) < 24 * 2**20
    for p in weights:
        assert all(v.dtype == mx.float16 for v in mx.load(str(p)).values()), p  # type: ignore[union-attr]
    cfg = json.loads((DEFAULT / "target" / "config.json").read_text())
    assert cfg["mtp_num_hidden_layers"] == 1 and cfg["eos_token_id"] == 0
    mtp_keys = mx.load(str(DEFAULT / "target" / "mtp.safetensors")).keys()  # type: ignore[union-attr]
    assert all(k.startswith("mtp.") for k in mtp_keys)


def test_heldout_prompts_are_batch_lines_from_heldout_files() -> None:
    rows = [json.loads(x) for x in (DEFAULT / "heldout_prompts.jsonl").read_text().splitlines()]
    assert len(rows) == 64
    assert len({r["custom_id"] for r in rows}) == 64
    heldout = set((DEFAULT / "heldout_files.txt").read_text().split())
    root = corpus.stdlib_root()
    for r in rows:
        assert r["method"] == "POST" and r["url"] == "/v1/completions"
        assert r["body"]["max_tokens"] == 64 and r["body"]["prompt"]
        rel = r["custom_id"].rsplit(":", 1)[0]
        assert rel in heldout and corpus.is_heldout(rel)
        src = root / rel
        if src.is_file() and corpus.python_version() == _trained_python():
            assert r["body"]["prompt"] in src.read_text(encoding="utf-8")


def _trained_python() -> str:
    summary = json.loads((DEFAULT / "train_summary.json").read_text())
    return str(summary["python_version"])


def test_greedy_acceptance_on_heldout_prompts_reaches_floor() -> None:
    target, tok = mlx_lm.load(str(DEFAULT / "target"))[:2]
    draft = mlx_lm.load(str(DEFAULT / "draft"))[0]
    mtp = load_mtp_head(DEFAULT / "target")
    for m in (target, draft, mtp):
        m.set_dtype(mx.float32)
    rows = [json.loads(x) for x in (DEFAULT / "heldout_prompts.jsonl").read_text().splitlines()]
    prompts = [tok.encode(r["body"]["prompt"]) for r in rows[:8]]
    mtp_hits, draft_hits = [], []
    for p, seq in zip(prompts, greedy_continuations(target, prompts, 32), strict=True):
        r = score_windows(target, draft, mtp, np.array([seq]))
        mtp_hits.append(r["mtp_ok"][0, len(p) - 1 :, 0])
        draft_hits.append(r["draft_ok"][0, len(p) - 1 :, 0])
    mtp_rate = float(np.concatenate(mtp_hits).mean())
    draft_rate = float(np.concatenate(draft_hits).mean())
    assert mtp_rate >= MTP_DEPTH1_FLOOR, mtp_rate
    assert draft_rate >= DRAFT_FLOOR, draft_rate


def test_mtp_speculative_decoding_is_lossless_and_accepts() -> None:
    """Real single-row MTP speculative decoding (workers/mtp/reference.py) on held-out prompts."""
    from workers.mtp.reference import mtp_greedy_decode

    target, tok = mlx_lm.load(str(DEFAULT / "target"))[:2]
    mtp = load_mtp_head(DEFAULT / "target")
    for m in (target, mtp):
        m.set_dtype(mx.float32)
    rows = [json.loads(x) for x in (DEFAULT / "heldout_prompts.jsonl").read_text().splitlines()]
    prompts = [tok.encode(r["body"]["prompt"]) for r in rows[:8]]
    plain = greedy_continuations(target, prompts, 32)
    # Measured: depth 1 accepts 0.761 of drafts, depth 3 accepts 0.568 (8 prompts x 32 tokens).
    for depth, floor in ((1, 0.65), (3, 0.46)):
        accepted = drafted = 0
        for p, ref in zip(prompts, plain, strict=True):
            out, stats = mtp_greedy_decode(target, mtp, p, 32, depth)
            assert out == ref[len(p) :]
            accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
        assert accepted / drafted >= floor, (depth, accepted / drafted)
