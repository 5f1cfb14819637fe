"""tokenizer.json rebuilt from GGUF metadata encodes tricky text to the same ids as the HF
tokenizer the GGUF was made from, and decodes them back to the text."""

from __future__ import annotations

import json

import pytest
from gguf import GGUFReader, GGUFWriter
from tokenizers import Tokenizer

from tests.workers.convert.gguf_files import CHAT_TEMPLATE, add_tokenizer, hf_tokenizer
from workers.convert.from_gguf import read_metadata
from workers.convert.gguf_tokenizer import build_tokenizer_config, build_tokenizer_json

TRICKY = [
    "plain words",
    "  two leading spaces and trailing  ",
    "tabs\tand\nnewlines\r\n\n\nblank lines",
    "digits 1234567890 and 3.14159, 1,000,000 and x2y3",
    "emoji 🦊🚀👩‍💻 and 東京, Ünïcödé, naïve café",
    "def f(x):\n    return {'a': x**2}  # it's they're we'll I'd\n",
    "<|im_start|>user\nhi<|im_end|>\n",
    "CAPS'S DON'T WE'VE",
    "",
    " ",
]


def _round_trip(tmp_path, pre):
    original = hf_tokenizer(pre)
    w = GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    add_tokenizer(w, original, pre, n_vocab=512)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = read_metadata(GGUFReader(tmp_path / "t.gguf"))
    rebuilt = Tokenizer.from_str(json.dumps(build_tokenizer_json(meta)))
    return original, rebuilt, meta


@pytest.mark.parametrize("pre", ["gpt-2", "smollm", "qwen2", "llama-bpe", "spm"])
def test_ids_and_text_round_trip_as_the_original(tmp_path, pre):
    original, rebuilt, _ = _round_trip(tmp_path, pre)
    for text in TRICKY:
        want = original.encode(text, add_special_tokens=False).ids
        got = rebuilt.encode(text, add_special_tokens=False).ids
        assert got == want, f"{pre}: {text!r}"
        decoded = rebuilt.decode(got, skip_special_tokens=False)
        assert decoded == original.decode(want, skip_special_tokens=False), f"{pre}: {text!r}"
        if pre != "spm":  # SPM's decoder drops the one leading space its normalizer adds
            assert decoded == text


def test_pre_tokenizer_matters(tmp_path):
    """The rules differ where they should: digits split singly (smollm), in threes
    (llama-bpe) or as whole runs (gpt-2); a wrong rule would change the ids."""
    text = "in 2024 we sold 1234567 units"
    pieces = {}
    for pre in ("gpt-2", "smollm", "llama-bpe"):
        _, rebuilt, _ = _round_trip(tmp_path, pre)
        pieces[pre] = rebuilt.encode(text, add_special_tokens=False).tokens
    longest = {p: max(len(t.strip("Ġ")) for t in toks if t.strip("Ġ").isdigit())
               for p, toks in pieces.items()}  # fmt: skip
    assert longest["smollm"] == 1 and 1 < longest["llama-bpe"] <= 3 < longest["gpt-2"]


def test_specials_bos_and_chat_template(tmp_path):
    _, rebuilt, meta = _round_trip(tmp_path, "qwen2")
    config = build_tokenizer_config(meta, 4096)
    assert config["eos_token"] == "<|im_end|>" and config["bos_token"] == "<|im_start|>"
    assert config["chat_template"] == CHAT_TEMPLATE and config["model_max_length"] == 4096
    assert len(rebuilt.encode("<|im_end|>", add_special_tokens=False).ids) == 1
    _, spm, meta = _round_trip(tmp_path, "spm")
    ids = spm.encode("hello", add_special_tokens=True).ids
    assert ids[0] == 1 and spm.id_to_token(1) == "<s>"  # add_bos_token honoured


def test_unknown_pre_tokenizer_names_the_value(tmp_path):
    _, _, meta = _round_trip(tmp_path, "qwen2")
    meta["tokenizer.ggml.pre"] = "tekken"
    with pytest.raises(ValueError, match="tokenizer.ggml.pre='tekken'"):
        build_tokenizer_json(meta)
    meta["tokenizer.ggml.model"] = "t5"
    with pytest.raises(ValueError, match="tokenizer.ggml.model='t5'"):
        build_tokenizer_json(meta)
