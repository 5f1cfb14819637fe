"""A byte-level BPE tokenizer (256 byte tokens, no merges, plus `</s>`), written as the
tokenizer.json / tokenizer_config.json pair a model directory carries. Built in code."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

EOS_ID = 256


def write_tiny_tokenizer(directory: Path, chat_template: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet, key=lambda c: _byte_of(c)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["</s>"])
    assert tok.token_to_id("</s>") == EOS_ID
    tok.save(str(directory / "tokenizer.json"))
    config = {"eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template:
        config["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def _byte_of(ch: str) -> int:
    # GPT-2 byte-to-unicode: printable bytes map to themselves, the rest to 256 + n.
    table = _bytes_to_unicode()
    return {v: k for k, v in table.items()}[ch]


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))
