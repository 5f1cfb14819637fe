"""Small GGUF files written in code with the `gguf` package, the way llama.cpp's
convert_hf_to_gguf.py lays them out: tensor names, Q/K row permutation (llama), metadata keys,
and the tokenizer's vocabulary, merges and pre-tokenizer name.

The name table and the permutation here are written independently of workers/convert, so a
mistake in the converter's tables shows up as a mismatch instead of cancelling out.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter, TokenType, quants
from mlx.utils import tree_flatten, tree_map
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tests.tiny import tiny_model

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. It's 2024; we've 1234567 items!",
    "    for i in range(10):\n\tprint(f'{i:03d}')  # tabs and spaces\r\n",
    "Ünïcödé wörds, naïve café, 東京 and emoji 🦊🚀 too.",
] * 30
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_RE = _QWEN2_RE.replace(r"|\p{N}|", r"|\p{N}{1,3}|")

_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def hf_tokenizer(pre: str, vocab_size: int = 400) -> Tokenizer:
    """A byte-level BPE trained with the pre-tokenizer the HF original of `pre` uses (or, for
    pre='spm', a SentencePiece-style BPE with byte fallback, as Llama 2's tokenizer.json)."""
    if pre == "spm":
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
        )
        tok.decoder = decoders.Sequence(
            [
                decoders.Replace("\u2581", " "),
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(" ", 1, 0),
            ]
        )
        alphabet = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", "<s>", "</s>", *alphabet],
            show_progress=False,
        )
        tok.train_from_iterator(CORPUS, trainer)
        return tok
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    pre_tok = {
        "gpt-2": pre_tokenizers.ByteLevel(add_prefix_space=False),
        "smollm": pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
        ),
        "qwen2": pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_QWEN2_RE), "isolated"), byte_level]
        ),
        "llama-bpe": pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_LLAMA3_RE), "isolated"), byte_level]
        ),
    }[pre]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tok
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def add_tokenizer(w: GGUFWriter, tok: Tokenizer, pre: str, n_vocab: int) -> None:
    """tokenizer.ggml.* as llama.cpp writes them (padded to the embedding's rows)."""
    doc = json.loads(tok.to_str())
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    special = {t["id"] for t in doc["added_tokens"] if t["special"]}
    types = [TokenType.CONTROL if i in special else TokenType.NORMAL for i in range(len(tokens))]
    if pre == "spm":
        types = [
            TokenType.BYTE if t.startswith("<0x") and len(t) == 6 else types[i]
            for i, t in enumerate(tokens)
        ]
        types[0] = TokenType.UNKNOWN
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(TokenType.UNUSED)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if pre == "spm":
        w.add_tokenizer_model("llama")
        w.add_token_scores([-float(i) for i in range(len(tokens))])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        merges = doc["model"]["merges"]
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
        w.add_bos_token_id(vocab["<|im_start|>"])
        w.add_eos_token_id(vocab["<|im_end|>"])
        w.add_add_bos_token(False)
        w.add_chat_template(CHAT_TEMPLATE)


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> ggml interleaved."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_name(hf: str) -> str:
    module, leaf = hf.rsplit(".", 1)
    if module in _TOP:
        return f"{_TOP[module]}.{leaf}"
    _, _, layer, rest = module.split(".", 3)
    return f"blk.{layer}.{_LAYER[rest]}.{leaf}"


VOCAB = 512  # > the tokenizers' 400 (256 byte symbols + merges + specials)


def tiny_family_model(arch: str, seed: int = 3):
    """tests.tiny's llama / qwen3, or a qwen2 of the same size (q/k/v biases, untied head)."""
    if arch != "qwen2":
        return tiny_model(arch, seed=seed, vocab=VOCAB)
    from mlx_lm.models import qwen2

    args = qwen2.ModelArgs(
        model_type="qwen2",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=VOCAB,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    mx.random.seed(seed)
    model = qwen2.Model(args)
    model.update(tree_map(lambda p: p * 2.0, model.parameters()))
    mx.eval(model.parameters())
    return model


def write_gguf(
    path: Path, model, arch: str, qtype: QT, tok: Tokenizer, pre: str, float_type: QT = QT.F32
) -> dict[str, np.ndarray]:
    """Write `model` as GGUF: 2-D weights in `qtype`, 1-D ones in `float_type`. Returns what
    llama.cpp would compute from each tensor, by mlx-lm name (gguf's own dequantize)."""
    a = model.args
    heads, kv_heads = a.num_attention_heads, a.num_key_value_heads
    w = GGUFWriter(str(path), arch)
    w.add_block_count(a.num_hidden_layers)
    w.add_context_length(4096)
    w.add_embedding_length(a.hidden_size)
    w.add_feed_forward_length(a.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(a.rms_norm_eps)
    w.add_rope_freq_base(float(getattr(a, "rope_theta", 10000.0)))
    if arch == "qwen3":
        w.add_key_length(a.head_dim)
        w.add_value_length(a.head_dim)
    add_tokenizer(w, tok, pre, a.vocab_size)
    expected: dict[str, np.ndarray] = {}
    for name, value in tree_flatten(model.parameters()):
        x = np.array(value.astype(mx.float32))
        qt = qtype if x.ndim == 2 else float_type
        raw = quants.quantize(x, qt)
        expected[name] = quants.dequantize(raw, qt).reshape(x.shape)
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            raw = llama_cpp_permute(raw, heads if ".q_proj." in name else kv_heads)
        w.add_tensor(gguf_name(name), raw, raw_dtype=qt)
    rope = model.model.layers[0].self_attn.rope
    if hasattr(rope, "_freqs"):  # Llama 3.1 scaling: llama.cpp stores scaled / plain frequency
        dims = rope.dims
        plain = a.rope_theta ** (np.arange(0, dims, 2) / dims)
        w.add_tensor("rope_freqs.weight", (np.array(rope._freqs) / plain).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected
