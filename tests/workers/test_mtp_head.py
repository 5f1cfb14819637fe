"""MTP head model code, loader and target-hidden helper, on tiny random models built in code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import llama, qwen3, qwen3_5
from mlx_lm.models.cache import KVCache, make_prompt_cache

from train.mtp_chain import chain_forward
from workers.mtp.hidden import embed, lm_head, target_hidden_and_logits
from workers.mtp.loader import load_mtp_head
from workers.mtp.qwen35 import MTPArgs, MTPHead

QWEN3_CFG: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 97,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "mtp_num_hidden_layers": 1,
}
QWEN35_CFG: dict[str, Any] = {
    "model_type": "qwen3_5",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 97,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "full_attention_interval": 2,
    "tie_word_embeddings": False,
    "mtp_num_hidden_layers": 1,
}


PRE_NORM_CFG = dict(QWEN3_CFG, specfleet_mtp_hidden="pre_norm")
DEFAULT_TARGET = Path(__file__).resolve().parents[2] / "workers" / "default_model" / "target"


def _scramble_norms(module: Any, seed: int = 5) -> None:
    """Give every RMSNorm weight of `module` random signs and scales (trained-like norms)."""
    rng = np.random.default_rng(seed)
    flat = [(k, v) for k, v in tree_flatten(module.parameters()) if v.ndim == 1]  # RMSNorms
    module.load_weights(
        [
            (k, mx.array(rng.choice([-1.0, 1.0], v.shape) * rng.uniform(0.3, 3.0, v.shape)))
            for k, v in flat
        ],
        strict=False,
    )
    mx.eval(module.parameters())


def _qwen3(seed: int = 0) -> qwen3.Model:
    mx.random.seed(seed)
    m = qwen3.Model(qwen3.ModelArgs.from_dict(QWEN3_CFG))
    mx.eval(m.parameters())
    return m


def _llama(tied: bool) -> llama.Model:
    mx.random.seed(1)
    args = llama.ModelArgs(
        model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=101,
        tie_word_embeddings=tied,
    )  # fmt: skip
    m = llama.Model(args)
    mx.eval(m.parameters())
    return m


def _qwen35() -> qwen3_5.Model:
    mx.random.seed(2)
    m = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(QWEN35_CFG))
    mx.eval(m.parameters())
    return m


def _flat(module: Any) -> dict[str, mx.array]:
    return dict(tree_flatten(module.parameters()))  # type: ignore[arg-type]


def _head(cfg: dict[str, Any], seed: int = 3) -> MTPHead:
    mx.random.seed(seed)
    head = MTPHead(MTPArgs.from_target_config(cfg))
    mx.eval(head.parameters())
    return head


@pytest.mark.parametrize("make", [_qwen3, lambda: _llama(True), lambda: _llama(False), _qwen35])
def test_target_hidden_and_logits_equals_model(make: Any) -> None:
    model = make()
    tokens = mx.array(np.random.default_rng(0).integers(0, 90, size=(2, 9)), dtype=mx.int32)
    h, logits = target_hidden_and_logits(model, tokens)
    assert mx.array_equal(logits, model(tokens)).item()
    # The hidden is pre-norm: re-normalising it reproduces the logits, and it is not normed.
    tm = model.language_model if hasattr(model, "language_model") else model
    assert mx.array_equal(lm_head(model, tm.model.norm(h)), logits).item()
    assert not mx.allclose(h, tm.model.norm(h)).item()
    # With caches: prefill 6 tokens then decode 3 one by one, identical to the model's own path.
    c_ours, c_ref = make_prompt_cache(model), make_prompt_cache(model)
    _, lo = target_hidden_and_logits(model, tokens[:, :6], c_ours)
    assert mx.array_equal(lo, model(tokens[:, :6], cache=c_ref)).item()
    for i in range(6, 9):
        _, lo = target_hidden_and_logits(model, tokens[:, i : i + 1], c_ours)
        assert mx.array_equal(lo, model(tokens[:, i : i + 1], cache=c_ref)).item()


def test_mtp_forward_shapes_and_cache_matches_full_sequence() -> None:
    target, head = _qwen3(), _head(QWEN3_CFG)
    tokens = mx.array(np.random.default_rng(1).integers(0, 97, size=(3, 8)), dtype=mx.int32)
    h, _ = target_hidden_and_logits(target, tokens)
    e = embed(target, tokens)
    # MTP position t pairs h_t with embed(x_{t+1}).
    pre, normed = head.step(h[:, :-1], e[:, 1:])
    assert pre.shape == normed.shape == (3, 7, 64)
    assert lm_head(target, normed).shape == (3, 7, 97)
    assert mx.array_equal(head(h[:, :-1], e[:, 1:]), normed).item()
    caches = head.make_cache()
    first = head(h[:, :4], e[:, 1:5], cache=caches[0])
    assert caches[0].offset == 4
    steps = [head(h[:, t : t + 1], e[:, t + 1 : t + 2], cache=caches[0]) for t in range(4, 7)]
    assert caches[0].offset == 7
    incremental = mx.concatenate([first, *steps], axis=1)
    np.testing.assert_allclose(np.array(incremental), np.array(normed), atol=1e-5)


def test_chain_forward_matches_cached_chained_inference() -> None:
    """train/mtp_chain.py (used to train and evaluate) equals chaining through a KV cache."""
    target, head = _qwen3(), _head(PRE_NORM_CFG)
    _scramble_norms(head)  # with unit norms, chaining g or mtp.norm(g) would look alike
    T, depth = 10, 3
    tokens = mx.array(np.random.default_rng(2).integers(0, 97, size=(1, T)), dtype=mx.int32)
    h, _ = target_hidden_and_logits(target, tokens)
    e = embed(target, tokens)
    N = T - depth
    outs = chain_forward(head, h[:, :N], e[:, 1 : N + depth], depth)
    for t in [0, 3, N - 1]:
        cache = KVCache()
        pre, normed = head.step(h[:, : t + 1], e[:, 1 : t + 2], cache=cache)  # entries 0..t
        prev = pre[:, -1:]
        np.testing.assert_allclose(np.array(normed[0, -1]), np.array(outs[0][0, t]), atol=1e-5)
        for d in range(2, depth + 1):  # chain input at depth d is x_{t+d}
            prev, nd = head.step(prev, e[:, t + d : t + d + 1], cache=cache)
            np.testing.assert_allclose(np.array(nd[0, 0]), np.array(outs[d - 1][0, t]), atol=1e-5)


def _write_checkpoint(
    d: Path, cfg: dict[str, Any], target: Any, head: MTPHead, layout: str
) -> dict[str, mx.array]:
    """Write a Qwen3.5-layout checkpoint: `mtp.*` inside model shards (HF) or a separate file."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    backbone = _flat(target)
    mtp = {"mtp." + k: v for k, v in _flat(head).items()}
    if layout == "hf_sharded":
        mx.save_safetensors(str(d / "model-00001-of-00002.safetensors"), backbone)
        mx.save_safetensors(str(d / "model-00002-of-00002.safetensors"), mtp)
        wm = {k: "model-00001-of-00002.safetensors" for k in backbone}
        wm |= {k: "model-00002-of-00002.safetensors" for k in mtp}
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    elif layout == "hf_single":
        mx.save_safetensors(str(d / "model.safetensors"), backbone | mtp)
    else:
        mx.save_safetensors(str(d / "model.safetensors"), backbone)
        mx.save_safetensors(str(d / "mtp.safetensors"), mtp)
    return mtp


@pytest.mark.parametrize("layout", ["hf_sharded", "hf_single", "separate"])
def test_loader_reads_qwen35_layout(tmp_path: Path, layout: str) -> None:
    target, head = _qwen3(), _head(QWEN3_CFG, seed=7)
    written = _write_checkpoint(tmp_path, QWEN3_CFG, target, head, layout)
    loaded = load_mtp_head(tmp_path)
    got = {"mtp." + k: v for k, v in _flat(loaded).items()}
    assert set(got) == set(written)
    for k, v in written.items():
        assert mx.array_equal(got[k], v).item(), k
    h = mx.random.normal((1, 4, 64))
    assert mx.array_equal(loaded(h, h), head(h, h)).item()


def test_loader_shifts_gemma_style_norms_for_qwen35(tmp_path: Path) -> None:
    target, head = _qwen35(), _head(QWEN35_CFG, seed=8)
    written = _write_checkpoint(tmp_path, QWEN35_CFG, target, head, "hf_single")
    loaded = _flat(load_mtp_head(tmp_path))
    assert loaded["layers.0.self_attn.q_proj.weight"].shape[0] == 2 * 4 * 16  # gated attention
    for k in ("pre_fc_norm_hidden.weight", "norm.weight", "layers.0.self_attn.q_norm.weight"):
        assert mx.allclose(loaded[k], written["mtp." + k] + 1.0).item(), k
    assert mx.array_equal(loaded["fc.weight"], written["mtp.fc.weight"]).item()
    # The hybrid target's MTP layer is full (gated) attention and runs on an mlx-lm KV cache.
    head35 = load_mtp_head(tmp_path)
    h, _ = target_hidden_and_logits(target, mx.array([[1, 2, 3, 4, 5]]))
    cache = head35.make_cache()
    out = head35(h[:, :4], embed(target, mx.array([[2, 3, 4, 5]])), cache=cache[0])
    assert out.shape == (1, 4, 64) and cache[0].offset == 4
    assert lm_head(target, out).shape == (1, 4, 97)


def test_loader_names_missing_tensor(tmp_path: Path) -> None:
    target, head = _qwen3(), _head(QWEN3_CFG)
    written = _write_checkpoint(tmp_path, QWEN3_CFG, target, head, "separate")
    del written["mtp.layers.0.mlp.down_proj.weight"]
    mx.save_safetensors(str(tmp_path / "mtp.safetensors"), written)
    with pytest.raises(ValueError, match=r"mtp\.layers\.0\.mlp\.down_proj\.weight.*missing"):
        load_mtp_head(tmp_path)


def test_loader_names_misshaped_tensor(tmp_path: Path) -> None:
    target, head = _qwen3(), _head(QWEN3_CFG)
    written = _write_checkpoint(tmp_path, QWEN3_CFG, target, head, "hf_single")
    written = _flat(target) | written
    written["mtp.fc.weight"] = mx.zeros((64, 64))  # should be [H, 2H]
    mx.save_safetensors(str(tmp_path / "model.safetensors"), written)
    with pytest.raises(
        ValueError, match=r"'mtp\.fc\.weight' has shape \(64, 64\), expected \(64, 128\)"
    ):
        load_mtp_head(tmp_path)


def test_loader_errors_without_mtp(tmp_path: Path) -> None:
    cfg = dict(QWEN3_CFG)
    del cfg["mtp_num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mtp_num_hidden_layers"):
        load_mtp_head(tmp_path)
    target, head = _qwen3(), _head(QWEN3_CFG)
    _write_checkpoint(tmp_path, QWEN3_CFG, target, head, "separate")
    (tmp_path / "mtp.safetensors").unlink()
    with pytest.raises(ValueError, match="no `mtp.\\*` tensor"):
        load_mtp_head(tmp_path)


def _plain_greedy(target, prompt: list[int], n: int) -> list[int]:
    """mlx-lm's model stepped one token at a time with its own KV cache (the reference)."""
    cache = make_prompt_cache(target)
    logits = target(mx.array([prompt]), cache=cache)
    out: list[int] = []
    for _ in range(n):
        out.append(int(mx.argmax(logits[0, -1]).item()))  # type: ignore[arg-type]
        logits = target(mx.array([[out[-1]]]), cache=cache)
    return out


@pytest.mark.parametrize("depth", [1, 3])
def test_reference_mtp_decode_matches_plain_greedy(depth: int) -> None:
    from workers.mtp.reference import mtp_greedy_decode

    target, head = _qwen3(), _head(QWEN3_CFG)
    prompt = [5, 17, 42, 8, 8, 63]
    plain = _plain_greedy(target, prompt, 12)
    out, stats = mtp_greedy_decode(target, head, prompt, 12, depth)
    assert out == plain
    assert stats.drafted > 0 and 0 <= stats.accepted <= stats.drafted


# -- hidden convention: specfleet_mtp_hidden ----------------------------------------------------


@pytest.mark.parametrize("make", [_qwen3, _qwen35])
def test_post_norm_hidden_is_the_lm_head_input(make: Any) -> None:
    model = make()
    tm = model.language_model if hasattr(model, "language_model") else model
    _scramble_norms(tm.model.norm)
    tokens = mx.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    pre, logits = target_hidden_and_logits(model, tokens)
    post, logits_post = target_hidden_and_logits(model, tokens, post_norm=True)
    assert (
        mx.array_equal(logits_post, logits).item() and mx.array_equal(logits, model(tokens)).item()
    )
    assert mx.array_equal(post, tm.model.norm(pre)).item()
    assert mx.array_equal(lm_head(model, post), logits).item()
    assert not mx.allclose(post, pre).item()


def test_head_chains_per_hidden_norm() -> None:
    """depth j > 1 gets g_{j-1} before mtp.norm ('pre_norm') or after it ('post_norm', vLLM and
    mlx-vlm for Qwen3.5/Qwen3-Next); the lm_head always reads the normed output."""
    h = mx.random.normal((2, 5, 64), key=mx.random.key(0))
    e = mx.random.normal((2, 5, 64), key=mx.random.key(1))
    pre_head = _head(PRE_NORM_CFG)
    _scramble_norms(pre_head)
    post_head = _head(dict(QWEN3_CFG, specfleet_mtp_hidden="post_norm"))
    post_head.update(pre_head.parameters())
    g_pre, normed_pre = pre_head.step(h, e)
    g_post, normed_post = post_head.step(h, e)
    assert mx.array_equal(normed_pre, normed_post).item()
    assert mx.array_equal(g_post, normed_post).item()
    assert mx.array_equal(pre_head.norm(g_pre), normed_pre).item()
    assert not mx.allclose(g_pre, normed_pre).item()


def test_hidden_norm_defaults_to_qwen35_convention_and_is_read_from_config(tmp_path: Path) -> None:
    assert MTPArgs.from_target_config(QWEN3_CFG).hidden_norm == "post_norm"  # key absent
    assert MTPArgs.from_target_config(PRE_NORM_CFG).hidden_norm == "pre_norm"
    nested = {"model_type": "qwen3_5", "text_config": dict(QWEN35_CFG)}
    nested["text_config"]["specfleet_mtp_hidden"] = "pre_norm"
    assert MTPArgs.from_target_config(nested).hidden_norm == "pre_norm"
    top = {"model_type": "qwen3_5", "specfleet_mtp_hidden": "pre_norm", "text_config": QWEN35_CFG}
    assert MTPArgs.from_target_config(top).hidden_norm == "pre_norm"
    target, head = _qwen3(), _head(QWEN3_CFG)
    _write_checkpoint(tmp_path, PRE_NORM_CFG, target, head, "separate")
    assert load_mtp_head(tmp_path).args.hidden_norm == "pre_norm"


@pytest.mark.parametrize("bad", ["post-norm", "POST_NORM", "", True, None])
def test_loader_names_bad_hidden_norm_and_the_fix(tmp_path: Path, bad: Any) -> None:
    target, head = _qwen3(), _head(QWEN3_CFG)
    _write_checkpoint(tmp_path, dict(QWEN3_CFG, specfleet_mtp_hidden=bad), target, head, "separate")
    with pytest.raises(ValueError) as err:
        load_mtp_head(tmp_path)
    msg = str(err.value)
    assert f"specfleet_mtp_hidden={bad!r}" in msg and str(tmp_path / "config.json") in msg
    assert "'post_norm'" in msg and "'pre_norm'" in msg


def test_default_model_declares_pre_norm() -> None:
    """The shipped head was trained on pre-norm hiddens (train/mtp_chain.py): its config says so."""
    cfg = json.loads((DEFAULT_TARGET / "config.json").read_text())
    assert cfg["specfleet_mtp_hidden"] == "pre_norm"
    assert MTPArgs.from_target_config(cfg).hidden_norm == "pre_norm"


def test_train_artifacts_write_pre_norm(tmp_path: Path) -> None:
    from train.artifacts import build_qwen3, save_model_dir

    cfg = dict(QWEN3_CFG)
    del cfg["mtp_num_hidden_layers"]
    save_model_dir(
        tmp_path, build_qwen3(cfg), dict(cfg, mtp_num_hidden_layers=1), None, _head(QWEN3_CFG)
    )
    assert load_mtp_head(tmp_path).args.hidden_norm == "pre_norm"
    save_model_dir(tmp_path / "plain", build_qwen3(cfg), cfg, None)
    assert "specfleet_mtp_hidden" not in json.loads(
        (tmp_path / "plain" / "config.json").read_text()
    )


def test_reference_decode_post_norm_matches_plain_greedy() -> None:
    from workers.mtp.reference import mtp_greedy_decode

    target = _qwen3()
    _scramble_norms(target.model.norm)
    head = _head(QWEN3_CFG)  # post_norm (no key)
    prompt = [5, 17, 42, 8, 8, 63]
    plain = _plain_greedy(target, prompt, 12)
    out, stats = mtp_greedy_decode(target, head, prompt, 12, 3)
    assert out == plain and stats.drafted > 0
