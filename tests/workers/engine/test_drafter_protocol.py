"""The drafter capabilities declared in workers/drafters/base.py match what the drafters provide
and what the engine uses: a drafter fed target hidden states is a TargetHiddenDrafter (the
engine sets its `engine_hidden`), a device-resident drafter with its own cache is a
BoundedDrafter (the engine calls its `tighten` after each pipelined round), and drafters
without those capabilities are neither. The engine looks these members up by name, so a
renamed member would silently skip a step; these tests catch that."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny import fit_mtp_head, mixed_prompts, perturbed, tiny_model
from workers import Engine, SamplingParams
from workers.drafters.base import BoundedDrafter, TargetHiddenDrafter
from workers.drafters.model import ModelDrafter
from workers.drafters.mtp import MTPDrafter
from workers.drafters.ngram import NgramDrafter


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen3", seed=5, layers=2)


def test_each_drafter_declares_exactly_the_capabilities_it_has(target) -> None:
    mtp = MTPDrafter(target, fit_mtp_head(target, steps=2))
    drafters = [mtp, ModelDrafter(perturbed(target)), NgramDrafter()]
    for d in drafters:
        # needs_target_hidden is what makes the engine treat it as a TargetHiddenDrafter.
        assert isinstance(d, TargetHiddenDrafter) == d.needs_target_hidden, d.name
    assert isinstance(mtp, BoundedDrafter) and mtp.device_resident
    assert mtp.hidden_norm == "pre_norm" and mtp.engine_hidden == "pre_norm"
    assert not any(isinstance(d, BoundedDrafter) for d in drafters[1:])


def test_engine_sets_engine_hidden_for_a_post_norm_head(target) -> None:
    pre = MTPDrafter(target, fit_mtp_head(target, steps=2))
    post = MTPDrafter(target, fit_mtp_head(target, steps=2, hidden_norm="post_norm"))
    Engine(target, drafter=pre, draft_depth=2)
    Engine(target, drafter=post, draft_depth=2)
    assert pre.engine_hidden == "pre_norm"  # the engine hands the pre-norm hidden
    assert post.engine_hidden == "post_norm"  # its forwards return the lm_head's input


class CountingMTP(MTPDrafter):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.tightened: list[tuple[np.ndarray, np.ndarray]] = []

    def tighten(self, bounds: np.ndarray, rows: np.ndarray) -> None:
        self.tightened.append((bounds.copy(), rows.copy()))
        super().tighten(bounds, rows)


def test_engine_tightens_a_bounded_drafter_after_pipelined_rounds(target) -> None:
    drafter = CountingMTP(target, fit_mtp_head(target, steps=2))
    engine = Engine(target, drafter=drafter, draft_depth=2, max_batch_size=4)
    prompts = mixed_prompts(3, seed=3)
    outs = engine.generate(prompts, SamplingParams(max_tokens=8))
    assert all(len(o.tokens) == 8 for o in outs)
    assert drafter.tightened, "the engine never called BoundedDrafter.tighten"
    for bounds, rows in drafter.tightened:
        assert bounds.shape == rows.shape and rows.dtype == bool
        assert (bounds >= 1).all()  # committed lengths: at least the prompt minus its last token
