"""Engine.load: mlx-lm model directories with n-gram, draft-model and MTP drafters."""

from __future__ import annotations

import pytest

from tests.tiny import fit_mtp_head, perturbed, reference_greedy, save_tiny_checkpoint, tiny_model
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("models")
    target = tiny_model("qwen3", seed=3)
    save_tiny_checkpoint(target, tiny_tokenizer, root / "target", mtp_head=fit_mtp_head(target, 40))
    save_tiny_checkpoint(perturbed(target, 0.3), tiny_tokenizer, root / "draft")
    return root, target


@pytest.mark.parametrize("drafter", [None, "ngram", "mtp", "model"])
def test_load_with_each_drafter_matches_plain_decode(model_dirs, drafter, tiny_tokenizer):
    root, target = model_dirs
    spec = f"model:{root / 'draft'}" if drafter == "model" else drafter
    engine = Engine.load(root / "target", drafter=spec, draft_depth=3, max_batch_size=4)
    assert engine.info().drafter == (drafter or "none")
    prompts = ["def add(a, b):", "the quick brown fox", "x", "return a + b\n"]
    outs = engine.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    for prompt, out in zip(prompts, outs):
        ids = tiny_tokenizer.encode(prompt, add_special_tokens=False)
        assert_matches(out.tokens, reference_greedy(target, ids, 12), f"{drafter}: {prompt!r}")


def test_unknown_drafter_names_the_value(model_dirs):
    root, _ = model_dirs
    with pytest.raises(ValueError, match="drafter='eagle'"):
        Engine.load(root / "target", drafter="eagle")
    with pytest.raises(ValueError, match="mtp_num_hidden_layers"):
        Engine.load(root / "draft", drafter="mtp")
