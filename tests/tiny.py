"""Tiny random models and tokenizers for tests (nothing is downloaded).

`tiny_model` builds an mlx-lm llama or qwen3 model from its ModelArgs in fp32. `perturbed`
makes a draft model that agrees with the target often but not always, so rows' accept counts
diverge round after round.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

from bench.forced_drafter import ForcedDrafter

VOCAB = 256


def tiny_model(arch: str = "llama", seed: int = 0, vocab: int = VOCAB, layers: int = 2):
    common = dict(
        hidden_size=64,
        num_hidden_layers=layers,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=vocab,
        tie_word_embeddings=True,
    )
    if arch == "llama":
        from mlx_lm.models import llama

        args = llama.ModelArgs(model_type="llama", **common)
        cls = llama.Model
    elif arch == "qwen3":
        from mlx_lm.models import qwen3

        args = qwen3.ModelArgs(
            model_type="qwen3",
            head_dim=16,
            max_position_embeddings=4096,
            rope_theta=10000.0,
            **common,
        )
        cls = qwen3.Model
    elif arch == "gemma3_text":
        from mlx_lm.models import gemma3_text

        args = gemma3_text.ModelArgs(
            model_type="gemma3_text",
            hidden_size=64,
            num_hidden_layers=max(layers, 3),
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            rms_norm_eps=1e-5,
            vocab_size=vocab,
            sliding_window=8,  # short, so prompts and outputs cross it
            sliding_window_pattern=3,
        )
        cls = gemma3_text.Model
    elif arch == "qwen3_5":
        from mlx_lm.models import qwen3_5

        text = dict(
            common,
            model_type="qwen3_5",
            head_dim=16,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            full_attention_interval=2,
            max_position_embeddings=4096,
            rope_parameters={
                "type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        )
        args = qwen3_5.ModelArgs(model_type="qwen3_5", text_config=text)
        cls = qwen3_5.Model
    else:
        raise ValueError(f"unknown tiny arch {arch!r}")
    mx.random.seed(seed)
    model = cls(args)
    # Larger-than-default init makes logits peaked enough that near-ties are rare.
    model.update(tree_map(lambda p: p * 2.0 if p.ndim == 2 else p, model.parameters()))
    mx.eval(model.parameters())
    return model


def perturbed(model, scale: float = 0.35, seed: int = 1):
    """A copy of `model` with Gaussian noise of `scale` x each tensor's std added."""
    import copy

    mx.random.seed(seed)
    draft = copy.deepcopy(model)
    draft.update(
        tree_map(lambda p: p + scale * p.std() * mx.random.normal(p.shape), model.parameters())
    )
    mx.eval(draft.parameters())
    return draft


def mixed_prompts(n: int, seed: int = 0, vocab: int = VOCAB, lengths=None) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = lengths or [1, 5, 17, 9, 33, 2, 12, 26][:n]
    return [rng.integers(0, vocab, size=L).tolist() for L in lengths[:n]]


def reference_greedy(model, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """mlx-lm's own single-sequence greedy decode, and each step's top-2 logit gap, on the
    modules mlx-lm built (an engine made on `model` re-classed some: they are undone here, so the
    reference shares no code path with specfleet)."""
    from mlx_lm.generate import generate_step

    from workers.routes import as_mlx_lm_built

    tokens, gaps = [], []
    with as_mlx_lm_built(model):
        for tok, logprobs in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
            top2 = mx.topk(logprobs, 2)
            gaps.append(float(mx.abs(top2[0] - top2[1]).item()))
            tokens.append(int(tok))
    return tokens, gaps


def make_tiny_tokenizer():
    """A byte-level BPE tokenizer with <eos>, wrapped like mlx_lm.load wraps one."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 16,  # ids stay below the tiny models' vocabulary
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = [
        "def add(a, b):\n    return a + b\n",
        "the quick brown fox jumps over the lazy dog",
    ] * 20
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    return TokenizerWrapper(fast)


class OracleDrafter(ForcedDrafter):
    """Test drafter: proposes the reference continuation, corrupting some drafts on purpose.

    A stand-in for a real drafter where the test is about the target side (rollback of
    recurrent state, compaction): it makes accept counts differ across rows and rounds for any
    target, deterministically. `refs` maps a prompt (tuple) to its reference continuation.
    """

    name = "oracle"

    def __init__(self, refs: dict[tuple[int, ...], list[int]], vocab: int = VOCAB, every: int = 3):
        super().__init__(refs, vocab, corrupt_every=every)


def fit_mtp_head(
    target, steps: int = 80, seed: int = 0, hidden_norm: str = "pre_norm", lr: float = 1e-2
):
    """A random MTP head (Qwen3.5 layout) briefly fitted to the target's greedy choices.

    A purely random head almost never agrees with the target; a few Adam steps make it agree
    often but not always, so rows' accept counts diverge. `hidden_norm` is the head's hidden
    convention (workers/mtp/qwen35.py): it is fitted on that target hidden and carries it.
    """
    import mlx.nn as nn
    import mlx.optimizers as optim

    from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits, text_model
    from workers.mtp.qwen35 import MTPArgs, MTPHead

    cfg = dict(getattr(target.args, "text_config", None) or vars(target.args))
    cfg["model_type"] = target.args.model_type
    cfg["mtp_num_hidden_layers"] = 1
    cfg["specfleet_mtp_hidden"] = hidden_norm
    mx.random.seed(seed)
    head = MTPHead(MTPArgs.from_target_config(cfg))
    rng = np.random.default_rng(seed)

    def loss_fn(head, h, x, y):
        # Pair (h_t, x_{t+1}) predicts the target's choice after x_{t+1}.
        out = head(h[:, :-1], embed(target, x[:, 1:]), mask="causal")
        return nn.losses.cross_entropy(lm_head(target, out), y[:, 1:]).mean()

    opt = optim.Adam(learning_rate=lr)
    step = nn.value_and_grad(head, loss_fn)
    vocab = int(text_model(target).model.embed_tokens.weight.shape[0])  # its own vocabulary
    for _ in range(steps):
        x = mx.array(rng.integers(0, vocab, size=(8, 40)))
        h, logits = target_hidden_and_logits(target, x, post_norm=head.args.post_norm)
        _, grads = step(head, mx.stop_gradient(h), x, mx.argmax(logits, -1))
        opt.update(head, grads)
        mx.eval(head.parameters(), opt.state)
    return head


def save_tiny_checkpoint(model, tokenizer, path, mtp_head=None) -> None:
    """Write `model` (+ tokenizer, + an MTP head in the Qwen3.5 layout) as an mlx-lm model dir."""
    import json
    from pathlib import Path

    from mlx.utils import tree_flatten
    from mlx_lm.utils import save_model

    path = Path(path)
    save_model(path, model)
    config = dict(vars(model.args))
    if mtp_head is not None:
        config["mtp_num_hidden_layers"] = len(mtp_head.layers)
        config["specfleet_mtp_hidden"] = mtp_head.args.hidden_norm
        weights = {f"mtp.{k}": v for k, v in tree_flatten(mtp_head.parameters())}
        mx.save_safetensors(str(path / "mtp.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, default=str))
    tokenizer._tokenizer.save_pretrained(str(path))
