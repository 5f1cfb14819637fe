"""Scheduler tokenizer: byte-level round trip, incremental detokenization, chat templates."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.tokenizer import TextTokenizer
from tests.cluster.tiny_tokenizer import EOS_ID, write_tiny_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(write_tiny_tokenizer(tmp_path_factory.mktemp("tok")))


def test_round_trip_bytes(tok: TextTokenizer) -> None:
    text = "héllo wörld — 你好 🙂"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))  # one token per byte
    assert tok.decode(ids) == text
    assert tok.eos_token_ids == [EOS_ID]


def test_incremental_matches_full_decode(tok: TextTokenizer) -> None:
    rng = random.Random(0)
    for _ in range(50):
        text = "".join(rng.choice(["a", " ", "é", "你", "🙂", "\n", "xyz"]) for _ in range(30))
        ids = tok.encode(text)
        d = tok.detokenizer()
        pieces = []
        i = 0
        while i < len(ids):
            k = rng.randint(1, 4)
            pieces.append(d.push(ids[i : i + k]))
            i += k
        pieces.append(d.flush())
        assert "".join(pieces) == text
        assert all("\ufffd" not in p for p in pieces)


def test_partial_character_is_held(tok: TextTokenizer) -> None:
    d = tok.detokenizer()
    b = "🙂".encode()
    assert d.push([b[0]]) == "" and d.push([b[1], b[2]]) == ""
    assert d.push([b[3]]) == "🙂"


def test_invalid_utf8_flushes_replacement(tok: TextTokenizer) -> None:
    d = tok.detokenizer()
    assert d.push([0xF0]) == ""
    assert d.flush() == "\ufffd"


def test_chat_template_fallback_and_custom(tmp_path: Path) -> None:
    t = TextTokenizer(write_tiny_tokenizer(tmp_path / "a"))
    msgs = [{"role": "user", "content": "hi"}]
    assert t.apply_chat_template(msgs) == "<|user|>\nhi\n<|assistant|>\n"
    t2 = TextTokenizer(
        write_tiny_tokenizer(
            tmp_path / "b",
            "{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}",
        )
    )
    assert t2.apply_chat_template(msgs) == "[user]hi</s>"


def test_missing_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tokenizer.json"):
        TextTokenizer(tmp_path)


def test_cluster_package_never_imports_mlx() -> None:
    code = (
        "import sys, cluster, cluster.tokenizer, cluster.policy, cluster.batch_job, "
        "cluster.openai_format\n"
        "import importlib, pkgutil\n"
        "for m in pkgutil.iter_modules(cluster.__path__):\n"
        "    importlib.import_module('cluster.' + m.name)\n"
        "bad = [m for m in sys.modules if m == 'mlx' or m.startswith(('mlx.', 'mlx_lm'))]\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_incremental_on_real_bpe_vocabulary() -> None:
    """The embedded default model's byte-level BPE (merges, multi-byte pieces): random token
    streams in random chunk sizes still concatenate to the full decode."""
    root = Path(__file__).resolve().parents[2]
    path = root / "workers" / "default_model" / "target"
    if not (path / "tokenizer.json").exists():
        pytest.skip("embedded default model not present")
    tok = TextTokenizer(path)
    rng = random.Random(1)
    n = tok.vocab_size
    for _ in range(30):
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 60))]
        d = tok.detokenizer()
        out, i = [], 0
        while i < len(ids):
            k = rng.randint(1, 5)
            out.append(d.push(ids[i : i + k]))
            i += k
        out.append(d.flush())
        assert "".join(out) == tok.decode(ids)
    text = "def f(x):\n    return x  # ünïcode ✓\n"
    assert tok.decode(tok.encode(text)) == text
