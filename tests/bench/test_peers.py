"""bench/peer_model.py's shared checkpoint: every loader reads back the model that wrote it.

The Hugging Face layout (norms stored as w - 1, conv1d in torch order, `mtp.*` beside the
backbone) is what lets mlx-lm, specfleet and mlx-vlm load one set of weights; a wrong conversion
would still load everywhere, so the checks compare against the in-memory model, not each other.
The mlx-vlm checks skip when it is not installed (`pip install --no-deps mlx-vlm==0.7.10`).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from bench.peer_model import PRESETS, build_target, fit_head, save_checkpoint
from bench.peer_runners import VLM_INSTALL, mlx_vlm_status

VLM_VERSION, VLM_ERROR = mlx_vlm_status()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    shape = PRESETS["tiny"]
    target = build_target(shape, seed=3)
    head = fit_head(target, steps=40, seed=3)
    path = tmp_path_factory.mktemp("q35")
    save_checkpoint(path, shape, target, head, "float32")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, shape.vocab_size, size=n).tolist() for n in (5, 23, 11)]
    return path, target, head, prompts


def test_mlx_lm_loads_the_writer_model(checkpoint):
    from mlx_lm import load

    path, target, _, prompts = checkpoint
    loaded = load(str(path))[0]
    x = mx.array([prompts[1]])
    np.testing.assert_allclose(np.array(loaded(x)), np.array(target(x)), atol=1e-4, rtol=1e-4)


def test_specfleet_mtp_head_roundtrips_and_decodes_like_mlx_lm(checkpoint):
    from workers import Engine, SamplingParams
    from workers.mtp.loader import load_mtp_head

    path, target, head, prompts = checkpoint
    want = dict(tree_flatten(head.parameters()))
    got = dict(tree_flatten(load_mtp_head(path).parameters()))
    assert got.keys() == want.keys()
    for k, v in want.items():
        np.testing.assert_allclose(np.array(got[k]), np.array(v), atol=1e-6, err_msg=k)
    from tests.tiny import reference_greedy

    engine = Engine.load(path, drafter="mtp", max_batch_size=3, draft_depth=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))
    assert [list(o.tokens) for o in outs] == [reference_greedy(target, p, 12)[0] for p in prompts]


@pytest.mark.skipif(
    VLM_ERROR is not None, reason=f"mlx-vlm unavailable ({VLM_ERROR}): {VLM_INSTALL}"
)
def test_mlx_vlm_loads_the_same_weights_and_its_batched_mtp_decodes_like_mlx_lm(checkpoint):
    from bench import peer_runners as R
    from tests.tiny import reference_greedy

    path, target, head, prompts = checkpoint
    vlm = R.load_mlx_vlm(path)
    x = mx.array([prompts[1]])
    np.testing.assert_allclose(
        np.array(vlm.model.language_model(x).logits), np.array(target(x)), atol=1e-4, rtol=1e-4
    )
    drafter = dict(tree_flatten(vlm.drafter.parameters()))
    for k, v in tree_flatten(head.parameters()):
        np.testing.assert_allclose(np.array(drafter[k]), np.array(v), atol=1e-6, err_msg=k)
    run = R.mlx_vlm_batch(vlm, prompts, max_tokens=12, B=3, depth=3, mtp=True)
    assert run.outputs == [reference_greedy(target, p, 12)[0] for p in prompts]
    assert run.rounds and run.accepted_per_row_round is not None
