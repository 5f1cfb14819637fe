"""A Hugging Face `tokenizer.json` (+ tokenizer_config.json) rebuilt from a GGUF's tokenizer
metadata, so text encodes to the same ids as under llama.cpp and the original HF tokenizer.

GGUF stores the vocabulary (`tokenizer.ggml.tokens`, `token_type`, `merges` or `scores`) and, for
byte-level BPE, only the *name* of the pre-tokenizer (`tokenizer.ggml.pre`); llama.cpp keeps the
regexes for each name in its source (llama-vocab.cpp). `PRE_TOKENIZER_REGEXES` holds the ones for
the families converted here; each list runs in order, every regex splitting the pieces the
previous one left ("isolated": matched and unmatched spans both stay), then the GPT-2 byte map.

SentencePiece vocabularies (`tokenizer.ggml.model == "llama"`: Llama 2, TinyLlama, Mistral) become
a BPE with byte fallback whose merges are rebuilt from the scores: llama.cpp's SPM tokenizer
merges the adjacent pair whose joined piece has the highest score, and a BPE whose merge ranks
follow the joined piece's score does the same.
"""

from __future__ import annotations

import json
from typing import Any

# llama.cpp token types (llama.h: LLAMA_TOKEN_TYPE_*)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SMOLLM = [r"\p{N}", _GPT2]  # single digits, then GPT-2 (StarCoder, SmolLM)
PRE_TOKENIZER_REGEXES: dict[str, list[str]] = {
    "gpt-2": [_GPT2],
    "gpt2": [_GPT2],
    "llama3": [_LLAMA3],
    "llama-v3": [_LLAMA3],
    "llama-bpe": [_LLAMA3],
    "falcon3": [_LLAMA3],
    "qwen2": [_QWEN2],
    "deepseek-r1-qwen": [_QWEN2],
    "stablelm2": [_QWEN2],
    "smollm": _SMOLLM,
    "starcoder": _SMOLLM,
    "refact": _SMOLLM,
    "codeshell": _SMOLLM,
    "default": [
        r"[\p{P}\$\+<=>\^~\|]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"\p{N}+",
        r"[0-9][0-9][0-9]",
    ],
}


def _bpe_pre_tokenizer(pre: str) -> dict[str, Any]:
    if pre not in PRE_TOKENIZER_REGEXES:
        raise ValueError(
            f"tokenizer.ggml.pre={pre!r} is not supported: known pre-tokenizers are "
            f"{sorted(PRE_TOKENIZER_REGEXES)}; add its regexes (llama.cpp's llama-vocab.cpp) to "
            "workers/convert/gguf_tokenizer.py"
        )
    splits = [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
        for r in PRE_TOKENIZER_REGEXES[pre]
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False}
    return {"type": "Sequence", "pretokenizers": [*splits, {**byte_level, "use_regex": False}]}


def _added_tokens(tokens: list[str], types: list[int]) -> list[dict[str, Any]]:
    """Control tokens are special (<|im_end|>, <s>); user-defined ones match in raw text (as
    llama.cpp matches them before pre-tokenizing), so neither is normalized."""
    out = []
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if kind in (CONTROL, USER_DEFINED, UNKNOWN):
            special = kind != USER_DEFINED
            out.append(
                {
                    "id": i,
                    "content": text,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": special,
                }
            )
    return out


def _spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[list[str]]:
    """Merges for a SentencePiece BPE vocabulary: every split of a normal piece into two
    pieces of the vocabulary, ranked by the joined piece's score (highest first), then by its
    id (files converted from HF without tokenizer.model carry one score for all pieces, and a
    BPE vocabulary lists pieces in the order they were merged)."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == NORMAL}
    merges: list[tuple[float, int, int, str, str]] = []
    for piece, pid in vocab.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((-scores[pid], pid, vocab[left], left, right))
    merges.sort()
    return [[left, right] for *_, left, right in merges]


def _post_processor(
    bos: str | None, eos: str | None, add_bos: bool, add_eos: bool, ids: dict[str, int]
) -> Any:
    """BOS/EOS added on encode, as llama.cpp does when add_bos_token / add_eos_token is set."""
    first = [{"SpecialToken": {"id": bos, "type_id": 0}}] if add_bos and bos else []
    last = [{"SpecialToken": {"id": eos, "type_id": 0}}] if add_eos and eos else []
    if not first and not last:
        return None
    seq = {"Sequence": {"id": "A", "type_id": 0}}
    used = [t for t in (bos if first else None, eos if last else None) if t]
    return {
        "type": "TemplateProcessing",
        "single": [*first, seq, *last],
        "pair": [*first, seq, *last, {"Sequence": {"id": "B", "type_id": 1}}, *last],
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in used},
    }


def build_tokenizer_json(meta: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer.json document for a GGUF's `tokenizer.ggml.*` metadata."""
    model = meta.get("tokenizer.ggml.model")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens))
    ids = {t: i for i, t in enumerate(tokens)}
    if model == "gpt2":
        merges = [m.split(" ", 1) for m in meta["tokenizer.ggml.merges"]]
        body: dict[str, Any] = {
            "normalizer": None,
            "pre_tokenizer": _bpe_pre_tokenizer(meta.get("tokenizer.ggml.pre") or "default"),
            "decoder": {
                "type": "ByteLevel",
                "add_prefix_space": True,
                "trim_offsets": True,
                "use_regex": True,
            },
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": bool(meta.get("tokenizer.ggml.ignore_merges", False)),
                "vocab": ids,
                "merges": merges,
            },
        }
    elif model == "llama":
        scores = list(meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens))
        unk_id = meta.get("tokenizer.ggml.unknown_token_id")
        prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
        spm_normalize = [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
        if prefix:
            spm_normalize.insert(0, {"type": "Prepend", "prepend": "\u2581"})
        decode = [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]
        if prefix:
            decode.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        body = {
            "normalizer": {"type": "Sequence", "normalizers": spm_normalize},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": decode},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": tokens[unk_id] if unk_id is not None else None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": True,
                "byte_fallback": True,
                "ignore_merges": False,
                "vocab": ids,
                "merges": _spm_merges(tokens, scores, types),
            },
        }
    else:
        raise ValueError(
            f"tokenizer.ggml.model={model!r} is not supported: use a GGUF with a 'gpt2' "
            "(byte-level BPE) or 'llama' (SentencePiece) tokenizer"
        )
    bos, eos = _special_text(meta, tokens, "bos"), _special_text(meta, tokens, "eos")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama"))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(tokens, types),
        "post_processor": _post_processor(bos, eos, add_bos, add_eos, ids),
        **body,
    }


def _special_text(meta: dict[str, Any], tokens: list[str], name: str) -> str | None:
    tid = meta.get(f"tokenizer.ggml.{name}_token_id")
    return tokens[tid] if tid is not None and 0 <= tid < len(tokens) else None


def build_tokenizer_config(meta: dict[str, Any], max_context: int | None) -> dict[str, Any]:
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
    }
    for name in ("bos", "eos", "unknown", "padding"):
        text = _special_text(meta, tokens, name)
        if text is not None:
            key = {"unknown": "unk", "padding": "pad"}.get(name, name)
            config[f"{key}_token"] = text
    if max_context:
        config["model_max_length"] = int(max_context)
    template = meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    return config


def tokenizer_files(meta: dict[str, Any], max_context: int | None) -> dict[str, str]:
    """file name -> text of tokenizer.json and tokenizer_config.json (raises on bad metadata
    before anything is written)."""
    doc = build_tokenizer_json(meta)
    config = build_tokenizer_config(meta, max_context)
    return {
        "tokenizer.json": json.dumps(doc, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2),
    }
