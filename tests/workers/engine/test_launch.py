"""Rounds launched from the launcher thread (workers/launch.py) change no token.

On a GPU an engine launches its pipelined rounds from a thread of its own;
the CPU (this suite's machine) does not by default. Here every round does, forced by the
environment, and the pipelining suite (tests/workers/engine/test_pipeline.py) runs again: rows
finishing in different rounds (EOS, max_tokens, stop sequences across windows), an abort while
a round is in flight, joins between in-flight rounds, logprobs, sampled joiners switching the
batch to synchronous rounds, each against mlx-lm's single-sequence decode or the synchronous
engine. Each of those tests must also have launched from the thread (`launched`,
tests/workers/engine/launcher_thread.py). Then what the thread adds: weights left lazy by the
caller, a failing launch (a joiner's prefill queued behind a round among them), waiting for the
launcher, settling, and the row threshold. Rows leaving and joining a routed batch:
tests/workers/engine/test_launch_joins.py.
"""

from __future__ import annotations

import threading
import time

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_map

from tests.tiny import fit_mtp_head, mixed_prompts, reference_greedy, tiny_model
from tests.workers.engine import launcher_thread
from tests.workers.engine.launcher_thread import hold_launches
from tests.workers.engine.test_parity import assert_matches
from tests.workers.engine.test_pipeline import (  # noqa: F401 - the suite, run again here
    depth,  # at one round in flight and at two (EngineConfig.pipeline_depth)
    setup,
    test_a_lone_row_switching_between_drafting_and_plain_rounds,
    test_a_sampled_joiner_switches_the_batch_to_synchronous_rounds,
    test_abort_while_a_round_is_in_flight,
    test_joins_between_in_flight_rounds,
    test_logprobs_match_the_synchronous_engine,
    test_pipelined_rounds_run_and_match_the_reference,
    test_rows_finishing_in_different_rounds,
)
from workers import Engine, SamplingParams, launch
from workers.backend import Backend
from workers.drafters.mtp import MTPDrafter

launched = launcher_thread.launched  # autouse: every round here from the launcher thread

# What the thread adds, tested below without counting launches of the suite's kind
NOT_COUNTED = {"test_a_failed_launch_raises_in_the_engine_thread",
               "test_waiting_for_the_launcher_on_its_own_thread_returns",
               "test_the_launcher_thread_is_for_gpus_and_batches_of_rows_min",
               "test_a_batch_growing_past_rows_min_moves_its_launches_to_the_thread"}  # fmt: skip


def test_rounds_launch_from_the_launcher_thread_on_its_stream(launched):
    target = tiny_model("qwen3", seed=5, layers=2)
    prompts = mixed_prompts(3, seed=4)
    engine = Engine(target, max_batch_size=4)
    outs = engine.generate(prompts, SamplingParams(max_tokens=12))
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 12), f"row {i}")
    assert len(launched) >= 10  # one launch per pipelined round
    assert mx.default_stream(mx.default_device()) == launch.process_launcher().stream


def test_weights_the_caller_left_lazy_are_evaluated_before_the_first_launch():
    """A lazy weight (an upcast, an update) belongs to the stream of the thread that made it,
    which the launcher thread cannot run. A prefill, run on the engine's thread, would evaluate
    the target's; the MTP head's are first read by a launched round. Without
    `launch.materialize` that launch fails: "There is no Stream(cpu, N) in current thread"."""
    done: dict = {}

    def in_a_fresh_thread() -> None:  # a thread whose own stream no engine has adopted
        try:
            target = tiny_model("qwen3", seed=6, layers=2)
            head = fit_mtp_head(target, steps=20)
            head.update(tree_map(lambda p: p.astype(mx.float16).astype(mx.float32),
                                 head.parameters()))  # fmt: skip
            prompt = mixed_prompts(1, seed=1)[0]
            engine = Engine(target, drafter=MTPDrafter(target, head), max_batch_size=2,
                            draft_depth=3)  # fmt: skip
            done["out"] = engine.generate([prompt], SamplingParams(max_tokens=16))[0].tokens
            done["ref"] = reference_greedy(target, prompt, 16)
        except Exception as e:  # noqa: BLE001 - handed to the test's thread
            done["error"] = e

    t = threading.Thread(target=in_a_fresh_thread)
    t.start()
    t.join()
    assert "error" not in done, done.get("error")
    assert_matches(done["out"], done["ref"], "a head with lazy weights")


def test_a_failed_launch_raises_in_the_engine_thread(monkeypatch):
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2)

    def failing(*arrays):
        raise RuntimeError("device lost")

    real = mx.async_eval
    in_launcher = lambda: threading.current_thread().name == "specfleet-launcher"  # noqa: E731
    monkeypatch.setattr(mx, "async_eval", lambda *a: failing(*a) if in_launcher() else real(*a))
    with pytest.raises(RuntimeError, match="device lost"):
        engine.generate(mixed_prompts(2, seed=3), SamplingParams(max_tokens=8))


def test_waiting_for_the_launcher_on_its_own_thread_returns(monkeypatch):
    """Code that mx.async_eval calls on the launcher thread (bench/graph_ops.py's counter walks
    each graph first, and a walk waits for launches: `launch.idle`) must not wait for the
    launch it is part of: stop 55's graph_ops run never finished."""
    launcher = launch.process_launcher()
    launcher.adopt()  # x below on the launcher's stream, which its thread can run
    waited: list[bool] = []
    real = mx.async_eval

    def walking(*arrays):
        if threading.current_thread().name == "specfleet-launcher":
            launch.idle()
            waited.append(True)
        return real(*arrays)

    monkeypatch.setattr(mx, "async_eval", walking)
    x = mx.arange(4) * 2
    ticket = launcher.launch([x])
    assert ticket._done.wait(timeout=30), "the launcher thread waited for itself"
    assert waited == [True] and ticket.read(x, np.int64).tolist() == [0, 2, 4, 6]


def test_the_launcher_thread_is_for_gpus_and_batches_of_rows_min(monkeypatch):
    gpu = Backend(builds_per_shape=True, computes_in_launch=False)
    cpu = Backend(builds_per_shape=False, computes_in_launch=True)
    monkeypatch.delenv(launch.ENV)
    assert launch.rows_min(gpu) == launch.ROWS_MIN and launch.rows_min(cpu) is None
    assert launch.ROWS_MIN == 1  # every round on a GPU (bench/results/s55/README.md)
    monkeypatch.setenv(launch.ENV, "0")
    assert launch.rows_min(gpu) is None
    monkeypatch.setenv(launch.ENV, "1")
    assert launch.rows_min(cpu) == 1


@pytest.mark.parametrize("drafter", [None, "mtp"])
def test_a_batch_growing_past_rows_min_moves_its_launches_to_the_thread(
    setup,  # noqa: F811 - the pipelining suite's fixture, imported above
    drafter,
    monkeypatch,
):
    """Rounds below the row threshold launch on the engine thread, the rest from the launcher
    thread, in one job: requests join one by one and finish at different lengths, so the
    batch crosses the threshold both ways with a round in flight each time (a round launched
    here, then one from the thread that takes its outputs as inputs while they are read)."""
    from tests.workers.engine.test_pipeline import engine_for, tokens_of
    from workers.pipeline import Flight

    target, head, prompts, refs = setup
    monkeypatch.setattr(launch, "rows_min", lambda backend: 3)
    routed, flights = [], []
    real_launch, real_flight = launch.Launcher.launch, Flight.launch
    monkeypatch.setattr(launch.Launcher, "launch",
                        lambda self, arrays: routed.append(1) or real_launch(self, arrays))  # fmt: skip
    monkeypatch.setattr(Flight, "launch",
                        lambda self, copies: flights.append(1) or real_flight(self, copies))  # fmt: skip
    engine = engine_for(target, head, drafter)
    lengths = [6, 24, 12, 20, 9, 24]
    for i, p in enumerate(prompts[:2]):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=lengths[i]))
    events: dict[str, list] = {}
    step = 0
    while engine.has_work():
        if 2 <= step < 6:  # the others join one a step: 2 -> 6 rows, then the batch drains
            i = step
            engine.add_request(f"r{i}", prompts[i], SamplingParams(max_tokens=lengths[i]))
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
        step += 1
    for i, n in enumerate(lengths):
        ref_tokens, gaps = refs[i]
        assert_matches(tokens_of(events[f"r{i}"]), (ref_tokens[:n], gaps[:n]), f"row {i}")
    assert 0 < len(routed) < len(flights), (len(routed), len(flights))


def test_settle_waits_for_the_launch_a_step_left_encoding(monkeypatch):
    """`step()` may return while the launcher thread still encodes the round it handed over;
    `settle()` returns only once that launch is done, after which the caller's own MLX work
    (here mlx-lm's decode, the reference) runs safely between steps."""
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2)
    held, release = hold_launches(monkeypatch)
    prompt = mixed_prompts(1, seed=2)[0]
    engine.add_request("r", prompt, SamplingParams(max_tokens=10))
    tokens: list[int] = []
    while not held.is_set():  # until a step returns with its launch held in the launcher
        tokens += [t for ev in engine.step() for t in ev.new_tokens]
    threading.Timer(0.3, release.set).start()
    engine.settle()
    assert release.is_set(), "settle() returned while the launch was still held"
    ref = reference_greedy(target, prompt, 10)  # MLX work between steps, after settle()
    while engine.has_work():
        tokens += [t for ev in engine.step() for t in ev.new_tokens]
    assert_matches(tokens, ref, "a row stepped around settle()")


@pytest.mark.parametrize("failing", ["prefill", "round"])
def test_nothing_queued_after_a_failed_launch_runs_before_the_engine_raises(launched, failing):
    """A launch fails after 0.2 s, so the next round is queued behind it first: a joiner's
    prefill chunk queued behind the round (nobody reads it), or a round (the next round is
    built on its arrays and launched before it is read). That round, and every launch after the
    failure, fails with its error without running (they may build on what it left scheduled but
    never computed) until the engine thread raises it, which it does within a minute rather
    than hanging. The process's launcher then serves a fresh engine again."""
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2, prefill_step_size=8)
    marker = mx.array(0)
    mx.eval(marker)
    real_launch, real_behind, real_eval = (
        launch.Launcher.launch,
        launch.Launcher.queue_behind,
        mx.async_eval,
    )
    rounds: list[int] = []
    failed, raised, ran_after = threading.Event(), threading.Event(), []

    def launch_marking_the_second(self, arrays):  # type: ignore[no-untyped-def]
        rounds.append(1)
        return real_launch(self, [*arrays, marker] if len(rounds) == 2 else arrays)

    def fail_marked(*arrays):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "specfleet-launcher":
            if arrays[-1] is marker:
                time.sleep(0.2)
                failed.set()
                raise RuntimeError(f"{failing} launch failed")
            if failed.is_set() and not raised.is_set():
                ran_after.append(len(arrays))
        return real_eval(*arrays)

    prompts = mixed_prompts(2, seed=2, lengths=[5, 30])
    outcome: dict = {}

    def run() -> None:
        try:
            engine.add_request("a", prompts[0], SamplingParams(max_tokens=30))
            engine.step()  # a's prefill (no round running: not routed)
            engine.step()  # a's first round, launched from the thread
            engine.add_request("b", prompts[1], SamplingParams(max_tokens=4))
            for _ in range(20):
                engine.step()  # b's first chunk queued behind a's round, or a's second round
        except RuntimeError as e:
            raised.set()
            outcome["error"] = str(e)

    with pytest.MonkeyPatch.context() as mp:
        if failing == "prefill":
            mp.setattr(launch.Launcher, "queue_behind",
                       lambda self, arrays: real_behind(self, [*arrays, marker]))  # fmt: skip
        else:
            mp.setattr(launch.Launcher, "launch", launch_marking_the_second)
        mp.setattr(mx, "async_eval", fail_marked)
        t = threading.Thread(target=run)
        t.start()
        t.join(60)
    assert not t.is_alive(), "the engine hung after a failed launch"
    assert outcome.get("error") == f"{failing} launch failed", outcome
    assert not ran_after, f"{len(ran_after)} launches ran after the failed one"
    before = len(launched)
    fresh = Engine(target, max_batch_size=2)
    outs = fresh.generate(prompts, SamplingParams(max_tokens=6))
    assert len(launched) > before  # the fresh engine's rounds went through the same thread
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 6), f"row {i}")


def test_generate_returns_with_no_launch_encoding(monkeypatch):
    """Rows leave without a settle, so the step in which the last row finishes may return with
    its launch (a round over finished rows) still encoding on the launcher thread. `generate`
    ends idle all the same: its caller's next MLX work (or the interpreter's exit, which then
    aborted in MLX's teardown) meets no launch under way. Here each launch takes 50 ms."""
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2)
    real = mx.async_eval

    def slow_in_launcher(*arrays):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "specfleet-launcher":
            time.sleep(0.05)
        return real(*arrays)

    monkeypatch.setattr(mx, "async_eval", slow_in_launcher)
    prompts = mixed_prompts(2, seed=2)
    outs = engine.generate(prompts, SamplingParams(max_tokens=6))
    launcher = launch.process_launcher()
    assert launcher._last._done.is_set(), "generate returned with a launch still encoding"
    for i, (o, p) in enumerate(zip(outs, prompts)):
        assert_matches(o.tokens, reference_greedy(target, p, 6), f"row {i}")


def test_a_rounds_launch_time_leaves_out_the_wait_for_the_launch_before(monkeypatch):
    """The hand-off of round N+1 waits while the launcher thread still launches round N (its
    encode, a graph switch or build on a GPU). That wait is not N+1's: in N+1's launch time it
    reached the depth policy as N+1's cost (depth-3 rounds probed among plain ones read 15 ms
    on the H200 where held they ran 3-5), so it is left out, as the per-step settle kept it
    out before. Here a launch is held 0.3 s."""
    target = tiny_model("qwen3", seed=5, layers=2)
    engine = Engine(target, max_batch_size=2)
    engine.add_request("r", mixed_prompts(1, seed=2)[0], SamplingParams(max_tokens=10))
    engine.step()  # the prompt's prefill
    held, release = hold_launches(monkeypatch)
    while not held.is_set():
        engine.step()
    threading.Timer(0.3, release.set).start()
    engine.step()  # hands the next round over: waits for the held launch
    flight = engine._flight
    assert flight is not None and flight.ticket is not None
    assert flight.ticket.handoff_s >= 0.2
    assert flight.launch_s < 0.1
    while engine.has_work():
        engine.step()
