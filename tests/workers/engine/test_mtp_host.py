"""The MTP head run on the host (workers/mtp/host_head.py, drafters/mtp_host.py): its step in
NumPy, or in C (host_step.c, built by host_native.py) for drafting steps of up to NATIVE_MAX_ROWS
rows.

Its step is checked against the MLX head's (same weights, fp32 tolerance) on both routes, its
drafts against MLX's drafter round by round, and every engine output against mlx-lm's plain
decode.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine.test_mtp_backlog import Every
from tests.workers.engine.test_parity import assert_matches
from workers import Engine, SamplingParams
from workers.compiled_step import COMPILE_ENV
from workers.drafters.mtp import MTPDrafter
from workers.drafters.mtp_host import ENV, HostMTPDrafter, host_head_wanted
from workers.mtp import host_native
from workers.mtp.hidden import embed, lm_head
from workers.mtp.host_head import NATIVE_MAX_ROWS, HostCache, HostHead, HostLinear

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def setup():
    target = tiny_model("qwen3", seed=3, layers=2)
    return target, fit_mtp_head(target, steps=60)


def _compiler() -> bool:
    import shutil

    return bool(shutil.which("cc") or shutil.which("gcc"))


@pytest.mark.parametrize("route", ["native", "numpy"])
@pytest.mark.parametrize("hidden_norm", ["pre_norm", "post_norm"])
def test_host_step_equals_the_mlx_heads(hidden_norm, route):
    """Ragged rows (cache lengths 5, 0, 9), windows of 4 and 1 pairs read at a pair per row:
    chain, normed hidden and logits equal MLX's head run row by row over mlx-lm's KVCache, to
    fp32 tolerance (every pair's key and value went into the cache: the 1-pair step reads
    them). `native`: the drafting steps in C (the prompt pairs stay NumPy's); `numpy`: all in
    NumPy."""
    target = tiny_model("qwen3", seed=4, layers=1)
    head = fit_mtp_head(target, steps=5, hidden_norm=hidden_norm)
    host = HostHead(head, target)
    if route == "native":  # a machine with a C compiler builds it; CI's has one
        assert (host.native is not None) == _compiler()
        if host.native is None:
            pytest.skip("no C compiler on this machine")
        real, calls = host.native, []
        host.native = lambda *a: calls.append(a[0].shape) or real(*a)  # type: ignore[assignment]
    else:
        host.native = None
    rng = np.random.default_rng(0)
    lengths, H = [5, 0, 9], head.args.hidden_size
    cache = HostCache(0, host.nk, host.d)
    mlx_caches = [KVCache() for _ in lengths]
    for r, n in enumerate(lengths):  # each row's earlier pairs, through both heads
        one = HostCache(1, host.nk, host.d)
        if n:
            h = rng.normal(size=(1, n, H)).astype(np.float32)
            t = rng.integers(0, 64, size=(1, n))
            mx.eval(head.step(mx.array(h), embed(target, mx.array(t)), cache=mlx_caches[r]))
            chain, normed = host.step(h, t, one, None)  # a prompt's pairs: keys and values only
            assert chain.shape == normed.shape == (1, 0, H)
            one.lengths += n
        cache.append(one)
    for W, last in ((4, np.array([3, 1, 0])), (1, np.zeros(3, dtype=np.int64))):
        h = rng.normal(size=(3, W, H)).astype(np.float32)
        t = rng.integers(0, 64, size=(3, W))
        chain, normed = host.step(h, t, cache, last)
        cache.lengths += W
        logits = host.logits(normed[:, 0])
        for r in range(3):
            g, n = head.step(mx.array(h[r : r + 1]), embed(target, mx.array(t[r : r + 1])),
                             cache=mlx_caches[r])  # fmt: skip
            i = int(last[r])
            want = lm_head(target, n[:, i : i + 1])[0, 0]
            np.testing.assert_allclose(chain[r, 0], np.array(g[0, i]), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(normed[r, 0], np.array(n[0, i]), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(logits[r], np.array(want), rtol=1e-4, atol=1e-4)
    if route == "native":
        assert calls == [(3, 4, head.args.hidden_size), (3, 1, head.args.hidden_size)]


def test_native_step_is_built_once_and_refused_cleanly(monkeypatch, tmp_path):
    """The C step builds into the user's cache directory and loads (into a private temporary
    one where that directory is writable by others); SPECFLEET_NATIVE_HEAD=0, no compiler, or
    a compiler that fails leave it out (HostHead then steps in NumPy)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    build = host_native.library.__wrapped__  # the uncached build
    if _compiler():
        assert build() is not None
        assert len(list((tmp_path / "specfleet").glob("host_step_*.so"))) == 1
    monkeypatch.setenv(host_native.ENV, "0")
    assert build() is None
    monkeypatch.delenv(host_native.ENV)
    shared = tmp_path / "shared"  # a cache directory others may write: not loaded from
    (shared / "specfleet").mkdir(parents=True)
    (shared / "specfleet").chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    if _compiler():
        assert build() is not None
        assert not list((shared / "specfleet").glob("*"))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cc").write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    (fake / "cc").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other"))
    assert build() is None  # the failed build: no library, nothing left behind
    assert not list((tmp_path / "other" / "specfleet").glob("*"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert build() is None


def test_native_step_refuses_what_it_would_read_or_write_out_of_bounds(setup):
    """The C step checks its inputs before touching memory: a token outside the vocabulary or
    a pair outside the window raises ValueError naming them, and leaves the cache as it was."""
    target, head = setup
    host = HostHead(head, target)
    if host.native is None:
        pytest.skip("no C compiler on this machine")
    H, V = head.args.hidden_size, host.embed.shape[0]
    cache = HostCache(1, host.nk, host.d)
    hidden = np.zeros((1, 2, H), np.float32)
    for tokens, last in (([[1, V]], [0]), ([[1, -1]], [0]), ([[1, 2]], [2])):
        before = cache.k.copy()
        with pytest.raises(ValueError, match="out of range"):
            host.step(hidden, np.array(tokens), cache, np.array(last))
        np.testing.assert_array_equal(cache.k, before)


def test_batches_over_native_max_rows_step_in_numpy(setup):
    """The C step runs drafting steps of up to NATIVE_MAX_ROWS rows; a larger batch's step and
    a prompt's pairs run in NumPy."""
    target, head = setup
    host = HostHead(head, target)
    if host.native is None:
        pytest.skip("no C compiler on this machine")
    calls: list = []
    real = host.native
    host.native = lambda *a: calls.append(a[0].shape[0]) or real(*a)  # type: ignore[assignment]
    H = head.args.hidden_size
    for B in (1, NATIVE_MAX_ROWS, NATIVE_MAX_ROWS + 1):
        cache = HostCache(B, host.nk, host.d)
        host.step(np.zeros((B, 3, H), np.float32), np.ones((B, 3), np.int64), cache, None)
        host.step(np.zeros((B, 1, H), np.float32), np.ones((B, 1), np.int64), cache,
                  np.zeros(B, np.int64))  # fmt: skip
    assert calls == [1, NATIVE_MAX_ROWS]


def _proposals(engine: Engine, probs: list | None = None) -> list[np.ndarray]:
    """Record every proposal's drafts ([B, K] on the host) as the engine makes them; into
    `probs`, if given, each proposal's q ([B, K, V], None for greedy drafts)."""
    seen: list[np.ndarray] = []
    orig = engine.drafter.propose  # type: ignore[union-attr]

    def spy(request):  # type: ignore[no-untyped-def]
        p = orig(request)
        engine.settle()
        seen.append(np.array(p.device_tokens()))
        if probs is not None:
            probs.append(None if p.probs is None else np.array(p.probs))
        return p

    engine.drafter.propose = spy  # type: ignore[union-attr,method-assign]
    return seen


@pytest.mark.parametrize("bs,depth", [(1, 3), (6, 1), (6, 4)])
def test_host_drafts_are_mlx_drafts_and_outputs_are_mlx_lms(setup, bs, depth):
    target, head = setup
    prompts = mixed_prompts(6, seed=11)
    drafts, accepted = {}, {}
    for kind in (MTPDrafter, HostMTPDrafter):
        engine = Engine(target, drafter=kind(target, head), max_batch_size=bs, draft_depth=depth)
        drafts[kind] = _proposals(engine)
        outs = engine.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        for i, (p, o) in enumerate(zip(prompts, outs)):
            assert_matches(o.tokens, reference_greedy(target, p, MAX_TOKENS), f"{kind} {i}")
        stats = engine.take_round_stats()
        accepted[kind] = sum(s.num_accepted_tokens for s in stats)
        assert 0 < accepted[kind] < sum(s.num_draft_tokens for s in stats)
    host, ref = drafts[HostMTPDrafter], drafts[MTPDrafter]
    assert len(host) == len(ref) >= 3
    same = sum(np.array_equal(a, b) for a, b in zip(host, ref))
    assert same >= 0.9 * len(ref), f"{same}/{len(ref)} proposals equal MLX's"
    assert accepted[HostMTPDrafter] >= 0.9 * accepted[MTPDrafter], accepted


def _first_draft_reference(target, head, prompt: list[int]) -> mx.array:
    """The head's logits [V] at the prompt's last pair (h_{L-2}, x_{L-1}), from mlx-lm's
    layers and the head over every pair, causal, no cache: what drafts x_L."""
    inner = target.model
    h = inner.embed_tokens(mx.array([prompt]))
    for layer in inner.layers:
        h = layer(h, mask="causal", cache=None)  # pre-norm: the setup head's convention
    x = mx.array([prompt])
    out = head(h[:, :-1], embed(target, x[:, 1:]), mask="causal")
    return lm_head(target, out[:, -1:])[0, 0]


@pytest.mark.parametrize("kind", [MTPDrafter, HostMTPDrafter])
def test_a_joiner_drafts_its_first_round_from_its_last_prompt_pair(setup, kind):
    """A joining row's first round drafts (it waited for a verify before): the head's output
    at the prompt's last pair predicts x_L, the first token that round verifies. Greedy: the
    first draft is the head's argmax there, computed apart, and outputs stay mlx-lm's.
    Sampled: the first draft's q is the softmax of those logits."""
    target, head = setup
    assert head.args.hidden_norm == "pre_norm"
    prompts = mixed_prompts(4, seed=9, lengths=[12, 7, 20, 16])
    engine = Engine(target, drafter=kind(target, head), max_batch_size=1, draft_depth=3)
    qs: list[np.ndarray | None] = []
    drafts = _proposals(engine, qs)
    for i, prompt in enumerate(prompts):
        want = _first_draft_reference(target, head, prompt)
        before = len(drafts)
        greedy = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
        out = engine.generate([prompt], greedy)
        assert_matches(out[0].tokens, reference_greedy(target, prompt, MAX_TOKENS), f"{i}")
        first = drafts[before]  # the row's first round (the prefill's step proposes nothing)
        assert first.shape == (1, 3), i
        assert int(first[0, 0]) == int(mx.argmax(want)), i
        before = len(drafts)
        sampled = SamplingParams(max_tokens=8, temperature=1.0, seed=i, ignore_eos=True)
        engine.generate([prompt], sampled)
        first, q = drafts[before], qs[before]
        assert first.shape == (1, 3) and q is not None, i
        np.testing.assert_allclose(q[0, 0], np.array(mx.softmax(want)), atol=2e-5)


def test_rows_join_and_leave_a_host_drafting_batch(setup):
    target, head = setup
    prompts = mixed_prompts(6, seed=12)
    engine = Engine(target, drafter=HostMTPDrafter(target, head), max_batch_size=8, draft_depth=3)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (30, 6, 18, 30, 9, 24)]
    for i in range(3):
        engine.add_request(f"r{i}", prompts[i], params[i])
    got: dict[str, list[int]] = {}
    for step in range(40):
        if step == 2:  # joiners arrive between rounds in flight
            for i in range(3, 6):
                engine.add_request(f"r{i}", prompts[i], params[i])
        for ev in engine.step():
            got.setdefault(ev.request_id, []).extend(ev.new_tokens)
        if not engine.has_work():
            break
    for i in range(6):
        ref = reference_greedy(target, prompts[i], params[i].max_tokens)
        assert_matches(got[f"r{i}"], ref, f"joined row {i}")
    assert engine.drafter.cache.num_rows == 0  # type: ignore[union-attr]


def test_backlog_restart_and_prompt_window_as_mlx_does(setup):
    """Long depth-0 stretches (max_backlog 3, drafting every 8th round) and a 5-pair prompt
    window: the host drafter drafts what MLX's drafter drafts, restarts rows from the kept
    pairs (cache length 3), and outputs stay mlx-lm's."""
    target, head = setup
    prompts = mixed_prompts(2, seed=5, lengths=[17, 9])
    drafts, restarted = {}, []
    for kind in (MTPDrafter, HostMTPDrafter):
        drafter = kind(target, head, prompt_window=5)
        drafter.max_backlog = 3
        engine = Engine(target, drafter=drafter, max_batch_size=2, draft_depth=3)
        engine.config.adaptive_depth = True
        engine.depth_policy = Every(max_depth=3)
        engine.depth_policy.period = 8
        if kind is HostMTPDrafter:
            orig = drafter._absorb

            def spy(orig=orig, drafter=drafter):  # type: ignore[no-untyped-def]
                restart = drafter._restart.copy()
                out = orig()
                if restart.any():  # restarted rows hold only the kept verifies' pairs
                    restarted.append(drafter.cache.lengths[restart].copy())
                return out

            drafter._absorb = spy  # type: ignore[method-assign]
        drafts[kind] = _proposals(engine)
        outs = engine.generate(prompts, SamplingParams(max_tokens=40, ignore_eos=True))
        for p, o in zip(prompts, outs):
            assert_matches(o.tokens, reference_greedy(target, p, 40), kind.__name__)
    host, ref = drafts[HostMTPDrafter], drafts[MTPDrafter]
    assert len(host) == len(ref) >= 3
    assert sum(np.array_equal(a, b) for a, b in zip(host, ref)) >= 0.9 * len(ref)
    assert restarted and all((lengths == 3).all() for lengths in restarted), restarted


def test_engine_load_runs_the_head_on_the_host_where_mlx_computes_in_launch(setup, monkeypatch):
    target, head = setup
    drafter = MTPDrafter(target, head)
    monkeypatch.delenv(ENV, raising=False)
    assert host_head_wanted(drafter) == (mx.default_device() == mx.cpu)
    monkeypatch.setenv(ENV, "0")
    assert not host_head_wanted(drafter)
    monkeypatch.setenv(ENV, "1")
    assert host_head_wanted(drafter)
    monkeypatch.setenv(COMPILE_ENV, "1")  # compiled MLX head steps asked for: MLX's head
    assert not host_head_wanted(drafter)
    monkeypatch.delenv(COMPILE_ENV)
    hybrid = tiny_model("qwen3_5", seed=3, layers=4)  # its head's layer is not qwen3's
    assert not host_head_wanted(MTPDrafter(hybrid, fit_mtp_head(hybrid, steps=1)))
    monkeypatch.delenv(ENV, raising=False)
    loaded = Engine.load(None, drafter="mtp", max_batch_size=1).drafter
    assert isinstance(loaded, HostMTPDrafter) == (mx.default_device() == mx.cpu)
    with pytest.raises(ValueError, match="no MLX steps to compile"):
        HostMTPDrafter(target, head).compile_steps()


def test_host_cache_grows_appends_and_keeps_rows_as_lists_would():
    """Writes past the first 64 slots, appends of caches of other sizes and row subsets (to
    none and back) against per-row lists of what was committed."""
    rng = np.random.default_rng(1)
    cache, rows = HostCache(2, 1, 2), [[], []]  # one key-value head of 2: a key is 2 floats

    def write(c: HostCache, want: list, counts: list[int], W: int) -> None:
        k = rng.normal(size=(c.num_rows, W, 1, 2)).astype(np.float32)
        c.write(k, -k)
        for r, n in enumerate(counts):
            want[r].extend(k[r, :n, 0].tolist())
        c.lengths += np.array(counts)

    for _ in range(30):  # 3 pairs written a round, 1 or 3 committed: past 64 slots
        write(cache, rows, [int(rng.integers(1, 4)), 3], 3)
    other, other_rows = HostCache(1, 1, 2, slots=8), [[]]
    write(other, other_rows, [5], 5)
    cache.append(other)
    rows += other_rows
    cache.keep_rows([2, 1])
    rows = [rows[2], rows[1]]
    write(cache, rows, [2, 1], 2)
    assert cache.lengths.tolist() == [len(r) for r in rows] and max(cache.lengths) > 64
    for r, want in enumerate(rows):
        np.testing.assert_array_equal(cache.k[r, : len(want), 0], np.array(want))
        np.testing.assert_array_equal(cache.v[r, : len(want), 0], -np.array(want))
    cache.keep_rows([])
    cache.append(HostCache(1, 1, 2))
    assert cache.num_rows == 1 and cache.lengths.tolist() == [0]


def test_host_head_views_the_targets_embedding_instead_of_copying_it(setup):
    """The embedding and the tied lm_head ([V, H], as large as the vocabulary) are the target's
    own buffer, read-only; the head's small weights are copies."""
    target, head = setup
    host = HostHead(head, target)
    weight = target.model.embed_tokens.weight
    target_buffer = np.asarray(memoryview(weight))
    assert np.shares_memory(host.embed, target_buffer)
    assert host.lm_head is host.embed  # tied
    assert not host.embed.flags.writeable
    np.testing.assert_array_equal(host.embed, np.array(weight))
    assert np.shares_memory(host.lm_head_linear.oi, target_buffer)  # its products read it too
    q_proj = np.asarray(memoryview(head.layers[0].self_attn.q_proj.weight))
    assert not np.shares_memory(host.q_proj.io, q_proj)
    assert host.q_proj.oi is None  # one copy of a head weight, not two


@pytest.mark.parametrize("shared", [False, True])
def test_host_linear_is_x_times_the_weight_transposed_at_every_row_count(shared):
    """`HostLinear` picks its product by row count (a gemv a row, a GEMM, the weight on the left)
    and input rank: each route equals x @ w.T computed in float64."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 32)).astype(np.float32)  # [out, in]
    linear = HostLinear(w, shared=shared)
    for shape in [(1, 32), (1, 1, 32), (2, 32), (3, 1, 32), (4, 32), (8, 1, 32), (2, 5, 32)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = linear(x)
        assert got.shape == (*shape[:-1], 48), shape
        want = x.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(shape))


def test_unsupported_heads_are_refused_with_the_reason(setup):
    target, head = setup
    assert HostHead.unsupported_reason(head, target) == ""
    bf16 = fit_mtp_head(target, steps=1)
    bf16.set_dtype(mx.bfloat16)
    assert "not float32" in HostHead.unsupported_reason(bf16, target)
    rope = head.layers[0].self_attn.rope
    try:
        rope.traditional = True
        assert "traditional" in HostHead.unsupported_reason(head, target)
    finally:
        rope.traditional = False
    hybrid = tiny_model("qwen3_5", seed=3, layers=4)
    with pytest.raises(ValueError, match="not a qwen3 decoder layer"):
        HostMTPDrafter(hybrid, fit_mtp_head(hybrid, steps=1))


def test_no_host_head_where_rounds_may_launch_from_a_launcher_thread(setup, monkeypatch):
    from workers import launch

    target, head = setup
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv(launch.ENV, "1")
    assert not host_head_wanted(MTPDrafter(target, head))


def test_sampled_drafts_at_depth_four_carry_the_q_they_were_drawn_from(setup):
    """A sampled request, 4 drafts deep, through both drafters from the same verified state:
    the host head's draft distributions equal MLX's head's at every depth (fp32 tolerance), the
    same uniforms draw the same tokens, and the proposal hands over exactly the q each draft
    was drawn from (what rejection sampling divides by)."""
    from workers.drafters.base import DraftRequest
    from workers.mtp.hidden import target_hidden_and_logits

    target, head = setup
    prompt = mixed_prompts(1, seed=21, lengths=[12])[0]
    hidden, logits = target_hidden_and_logits(target, mx.array([prompt]))
    nxt = int(mx.argmax(logits[0, -1]).item())
    runs = {}
    for kind in (MTPDrafter, HostMTPDrafter):
        drafter = kind(target, head)
        drafter.add_rows([prompt], hidden[:, :-1])  # pairs (h_t, x_t+1) of the prompt
        # The first verify: a plain round committing `nxt` after the prompt's last hidden.
        drafter.commit(mx.array([0]), hidden[:, -1:], mx.array([[nxt]], dtype=mx.int32))
        rng, qs, drawn = np.random.default_rng(5), [], []

        def select(step_logits, step, rng=rng, qs=qs, drawn=drawn):  # type: ignore[no-untyped-def]
            q = mx.softmax(step_logits.astype(mx.float32) / 0.8, axis=-1)  # [1, V]
            cdf = np.cumsum(np.array(q[0], dtype=np.float64))
            token = int(min(np.searchsorted(cdf, rng.random() * cdf[-1]), len(cdf) - 1))
            qs.append(np.array(q[0]))
            drawn.append(token)
            return mx.array([token], dtype=mx.int32), q

        request = DraftRequest(histories=[prompt + [nxt]], depths=np.array([4]), select=select)
        proposal = drafter.propose(request)
        assert proposal.counts.tolist() == [4] and proposal.probs is not None
        np.testing.assert_array_equal(np.array(proposal.probs[0]), np.stack(qs))
        assert np.array(proposal.device_tokens())[0].tolist() == drawn
        runs[kind] = (np.stack(qs), drawn)
    np.testing.assert_allclose(runs[HostMTPDrafter][0], runs[MTPDrafter][0], atol=1e-5)
    assert runs[HostMTPDrafter][1] == runs[MTPDrafter][1]
