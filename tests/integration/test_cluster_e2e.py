"""End to end on a real multi-node Ray cluster on one machine (ray.cluster_utils.Cluster: a
head and two nodes advertising `specfleet_worker`), real gRPC, real engines on a tiny random
llama (target + perturbed draft model), the Python client through the gateway.

Kept light for 2 cores: tiny model, small max_tokens, one cluster for the whole module.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from cluster import Client  # noqa: E402
from cluster.client import QueueFullError, SpecfleetError  # noqa: E402
from cluster.policy import PolicyConfig  # noqa: E402
from cluster.ray_actor import ClusterSpec, start_cluster  # noqa: E402
from cluster.runtime import RuntimeConfig  # noqa: E402
from cluster.scheduler import SchedulerConfig  # noqa: E402
from tests.integration.tiny_ckpt import write_tiny_checkpoints  # noqa: E402
from tests.ray_startup import start_ray  # noqa: E402
from workers.service.engine_spec import EngineSpec, serving_config  # noqa: E402
from workers.service.grpc_server import WorkerServerConfig  # noqa: E402
from workers.types import SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MAX_QUEUE = 256
pytestmark = pytest.mark.timeout(600)


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("fleet")
    write_tiny_checkpoints(d)
    cluster = start_ray(lambda: Cluster(initialize_head=True, head_node_args={"num_cpus": 1}))
    for _ in range(2):
        start_ray(lambda: cluster.add_node(num_cpus=1, resources={"specfleet_worker": 1}))
    ray.init(
        address=cluster.address,
        namespace="specfleet",
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    engine = EngineSpec(
        model=str(d / "target"),
        drafter=f"model:{d / 'draft'}",
        # Fixed depth: the tiny draft is the target's size, which adaptive depth may not use.
        config=serving_config(draft_depth=3, max_batch_size=16, adaptive_depth=False),
    )
    spec = ClusterSpec(
        engine=engine,
        worker=WorkerServerConfig(host="127.0.0.1", metrics_port=0, model_name="tiny"),
        actor=RuntimeConfig(
            scheduler=SchedulerConfig(PolicyConfig(max_queue=MAX_QUEUE)),
            tokenizer_path=str(d / "target"),
            metrics_port=0,
            prometheus_targets_dir=str(d / "targets"),
            model_name="tiny",
        ),
    )
    running = start_cluster(spec, connect_timeout_s=120)
    from workers import Engine

    ref_engine = Engine.load(str(d / "target"), drafter=f"model:{d / 'draft'}", draft_depth=3)
    yield {"cluster": running, "dir": d, "ref": ref_engine, "ray_cluster": cluster}
    running.shutdown()
    ray.shutdown()
    cluster.shutdown()


def reference(fleet, prompts, max_tokens: int) -> list[list[int]]:
    outs = fleet["ref"].generate(prompts, SamplingParams(max_tokens=max_tokens))
    return [o.tokens for o in outs]


def mixed_prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [
        [rng.randrange(1, 240) for _ in range(rng.choice([1, 3, 8, 17, 40, 90]))] for _ in range(n)
    ]


def test_two_nodes_serve_200_requests_equal_to_engine(fleet) -> None:
    addrs = fleet["cluster"].addresses
    assert len(addrs["workers"]) == 2
    targets = json.loads((fleet["dir"] / "targets" / "workers.json").read_text())
    assert len(targets) == 2 and all(t["labels"]["model"] == "tiny" for t in targets)
    ps = mixed_prompts(220, seed=0)
    texts = ["the quick brown fox", "def add(a, b):", "lazy dog"]
    want = reference(fleet, ps, 8)
    want_text = reference(fleet, texts, 8)
    with Client.from_ray() as via_ray:  # found through the named scheduler actor
        assert via_ray.address == addrs["gateway"]
        assert via_ray.generate(ps[0], max_tokens=8).tokens == want[0]
    with Client(addrs["gateway"]) as c:
        info = c.cluster_info()
        nodes = {w.worker_id for w in info.workers if w.connected}
        assert nodes == {"worker-0", "worker-1"}
        batch = c.generate_batch(ps[:110], max_tokens=8)
        results: dict[int, list[int]] = {i: o.tokens for i, o in enumerate(batch)}
        lock = threading.Lock()

        def one(i: int) -> None:
            toks = []
            for d in c.stream(ps[i], max_tokens=8):
                toks += d.tokens
            with lock:
                results[i] = toks

        threads = [threading.Thread(target=one, args=(i,)) for i in range(110, 220)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert [results[i] for i in range(220)] == want
        lp_ref = fleet["ref"].generate(ps[:4], SamplingParams(max_tokens=8, logprobs=True))
        for p, r in zip(ps[:4], lp_ref):
            got = c.generate(p, max_tokens=8, logprobs=True)
            assert got.tokens == r.tokens
            assert got.logprobs == pytest.approx(r.logprobs, abs=1e-4)
        got_text = [c.generate(t, max_tokens=8) for t in texts]
        assert [g.tokens for g in got_text] == want_text
        assert all(g.text == fleet["ref"].tokenizer.decode(g.tokens) for g in got_text)
        acc = sum(o.usage.accepted_tokens for o in batch)
        assert sum(o.usage.draft_tokens for o in batch) > 0 and acc > 0
    url = addrs["metrics"]
    assert metric(url, "specfleet_scheduler_batch_size_count") > 0
    per_worker = [
        metric(f"http://{a['metrics'].split('//')[-1]}", "specfleet_generation_tokens_total")
        for a in addrs["workers"].values()
    ]
    assert all(n > 0 for n in per_worker), per_worker


def test_killed_worker_requests_complete_exactly_once(fleet) -> None:
    running = fleet["cluster"]
    addrs = running.addresses
    url = addrs["metrics"]
    requeues_before = metric(url, "specfleet_scheduler_requeues_total")
    ps = mixed_prompts(48, seed=1)
    # Odd requests sample (T=0.8, seeded, coupled acceptance): position-keyed noise makes them
    # as reproducible as greedy ones, so they too must match a no-fault run after the requeue.
    sampled = {"temperature": 0.8, "acceptance": "coupled"}
    params = [
        SamplingParams(max_tokens=40, seed=i, **sampled) if i % 2 else SamplingParams(max_tokens=40)
        for i in range(len(ps))
    ]
    want = [o.tokens for o in fleet["ref"].generate(ps, params)]
    greedy = reference(fleet, ps[1::2], 40)
    assert sum(g != w for g, w in zip(greedy, want[1::2])) >= len(greedy) // 2, "really sampled"
    victim = ray.get(running.workers[0].addresses.remote(), timeout=60)
    results: dict[int, list[int]] = {}
    counts: dict[int, int] = {}
    lock = threading.Lock()
    with Client(addrs["gateway"]) as c:

        def one(i: int) -> None:
            toks, n = [], 0
            kw = {"seed": i, **sampled} if i % 2 else {}
            for d in c.stream(ps[i], max_tokens=40, request_id=f"fault-{i}", **kw):
                toks += d.tokens
                n += 1
            with lock:
                results[i], counts[i] = toks, n

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(ps))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            w0 = [w for w in c.cluster_info().workers if w.worker_id == "worker-0"][0]
            if w0.inflight >= 4 and metric(url, "specfleet_scheduler_generation_tokens_total") > 0:
                break
            time.sleep(0.02)
        assert w0.inflight >= 4, "worker-0 must hold in-flight requests when it is killed"
        os.kill(victim["pid"], signal.SIGKILL)
        for t in threads:
            t.join(300)
        assert len(results) == len(ps)
        assert [results[i] for i in range(len(ps))] == want, "each token once, as without fault"
        assert metric(url, "specfleet_scheduler_requeues_total") > requeues_before
        # Ray restarts the worker; the scheduler reconnects and uses it again.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            w0 = [w for w in c.cluster_info().workers if w.worker_id == "worker-0"][0]
            if w0.connected and w0.connections >= 2:
                break
            time.sleep(0.5)
        assert w0.connected and w0.connections >= 2
        assert metric(url, "specfleet_scheduler_worker_restarts_total", worker="worker-0") >= 1
        after = ray.get(running.workers[0].addresses.remote(), timeout=60)
        assert after["pid"] != victim["pid"]
        assert c.generate(ps[0], max_tokens=40).tokens == want[0]
        assert c.generate(ps[1], max_tokens=40, seed=1, **sampled).tokens == want[1]


def test_load_64_clients_1000_requests_and_overload(fleet) -> None:
    addrs = fleet["cluster"].addresses
    ps = mixed_prompts(1024, seed=2)
    seen: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    clients = [Client(addrs["gateway"]) for _ in range(8)]

    def worker(k: int) -> None:
        c = clients[k % len(clients)]
        for i in range(k, len(ps), 64):
            try:
                out = c.generate(ps[i], max_tokens=3, request_id=f"load-{i}")
            except BaseException as e:  # noqa: BLE001 - collected and asserted below
                errors.append(e)
                continue
            with lock:
                assert out.request_id not in seen, "duplicate delivery"
                seen[out.request_id] = out.tokens

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    elapsed = time.monotonic() - t0
    assert not errors, errors[:3]
    assert sorted(seen) == sorted(f"load-{i}" for i in range(len(ps)))
    assert all(len(v) >= 1 for v in seen.values())
    sample = list(range(0, len(ps), 37))
    want = reference(fleet, [ps[i] for i in sample], 3)
    assert [seen[f"load-{i}"] for i in sample] == want
    print(f"\nload: {len(ps)} requests, 64 clients, {elapsed:.1f}s, {len(ps) / elapsed:.0f} req/s")
    # Overload: one batch far beyond the queue bound; the excess is refused, the rest served.
    c = clients[0]
    over = c.generate_batch([[1, 2, 3]] * (MAX_QUEUE * 3), max_tokens=2, return_exceptions=True)
    refused = [o for o in over if isinstance(o, SpecfleetError)]
    served = [o for o in over if not isinstance(o, SpecfleetError)]
    assert refused and all(isinstance(o, QueueFullError) for o in refused)
    assert "queue is full" in refused[0].message
    assert len(served) >= MAX_QUEUE // 2
    # Recovered: new requests succeed.
    assert c.generate([4, 5, 6], max_tokens=2).finish_reason in ("length", "stop")
    assert metric(addrs["metrics"], "specfleet_scheduler_rejected_total") >= len(refused)
    for cl in clients:
        cl.close()


def test_offline_batch_kill_and_resume_against_cluster(fleet, tmp_path: Path) -> None:
    addrs = fleet["cluster"].addresses
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ps = mixed_prompts(160, seed=3)
    with open(inp, "w") as f:
        for i, p in enumerate(ps):
            body = {"prompt": p, "max_tokens": 6}
            f.write(
                json.dumps({"custom_id": f"c{i}", "url": "/v1/completions", "body": body}) + "\n"
            )
            if i == 40:
                f.write("not json at all\n")
                f.write(
                    json.dumps({"custom_id": "bad", "body": {"prompt": [1], "top_p": 3}}) + "\n"
                )
    cmd = [
        sys.executable,
        "-m",
        "cluster.cli",
        "batch",
        str(inp),
        "-o",
        str(out),
        "--gateway",
        addrs["gateway"],
        "--concurrency",
        "4",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, cwd=ROOT)
    partial = tmp_path / "out.jsonl.partial"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if partial.exists() and partial.read_bytes().count(b"\n") >= 80:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = partial.read_bytes().count(b"\n")
    assert 80 <= first < 161, first
    res = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed" in res.stderr and "acceptance:" in res.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    ids = [r["custom_id"] for r in rows]
    assert sorted(ids) == sorted([f"c{i}" for i in range(160)] + ["bad"])
    by = {r["custom_id"]: r for r in rows}
    want = reference(fleet, ps, 6)
    for i in range(160):
        body = by[f"c{i}"]["response"]["body"]
        assert body is not None, by[f"c{i}"]  # the row's error says why
        assert body["specfleet"]["token_ids"] == want[i]
    assert by["bad"]["response"]["status_code"] == 400 and "top_p" in by["bad"]["error"]["message"]
    errors = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert len(errors) == 2 and any("not valid JSON" in e["error"]["message"] for e in errors)


def test_scheduler_actor_killed_clients_resume_exactly_once(fleet) -> None:
    """Ray restarts the scheduler actor (same node, same gateway port); greedy streams retry
    with their request ids and skip what they already delivered."""
    running = fleet["cluster"]
    addrs = ray.get(running.scheduler.addresses.remote(), timeout=60)
    ps = mixed_prompts(12, seed=4)
    want = reference(fleet, ps, 60)
    results: dict[int, list[int]] = {}
    first_seen = threading.Event()
    with Client(addrs["gateway"], retry_timeout_s=120) as c:

        def one(i: int) -> None:
            toks = []
            for d in c.stream(ps[i], max_tokens=60, request_id=f"sched-kill-{i}"):
                toks += d.tokens
                if toks:
                    first_seen.set()
            results[i] = toks

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(ps))]
        for t in threads:
            t.start()
        assert first_seen.wait(60)
        os.kill(addrs["pid"], signal.SIGKILL)
        for t in threads:
            t.join(300)
        assert [results.get(i) for i in range(len(ps))] == want
        after = ray.get(running.scheduler.addresses.remote(), timeout=120)
        assert after["pid"] != addrs["pid"] and after["gateway"] == addrs["gateway"]
        assert c.generate(ps[0], max_tokens=60).tokens == want[0]


def test_worker_node_lost_then_replaced(fleet) -> None:
    """A whole worker node goes away mid-batch (its raylet and every process on it): its
    requests finish on the other node, exactly once; a replacement node gets the worker back."""
    running, rc = fleet["cluster"], fleet["ray_cluster"]
    addrs = ray.get(running.scheduler.addresses.remote(), timeout=60)
    victim = ray.get(running.workers[1].addresses.remote(), timeout=60)
    node = next(n for n in rc.worker_nodes if n.node_id == victim["node_id"])
    ps = mixed_prompts(40, seed=5)
    want = reference(fleet, ps, 40)
    results: dict[int, list[int]] = {}
    with Client(addrs["gateway"], retry_timeout_s=120) as c:

        def one(i: int) -> None:
            results[i] = c.generate(ps[i], max_tokens=40, request_id=f"node-{i}").tokens

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(ps))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            w1 = [w for w in c.cluster_info().workers if w.worker_id == "worker-1"][0]
            if w1.inflight >= 4:
                break
            time.sleep(0.02)
        assert w1.inflight >= 4
        rc.remove_node(node)
        for t in threads:
            t.join(300)
        assert [results.get(i) for i in range(len(ps))] == want
        rc.add_node(num_cpus=1, resources={"specfleet_worker": 1})
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            w1 = [w for w in c.cluster_info().workers if w.worker_id == "worker-1"][0]
            if w1.connected:
                break
            time.sleep(0.5)
        assert w1.connected, "the worker actor must come back on the new node"
        moved = ray.get(running.workers[1].addresses.remote(), timeout=60)
        assert moved["node_id"] != victim["node_id"]
