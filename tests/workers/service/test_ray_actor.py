"""Issue test 6: the worker actor in a real local Ray runtime serves over gRPC, is restarted by
Ray after its process is killed, serves again, and is not restarted after shutdown()."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import grpc
import pytest

ray = pytest.importorskip("ray")

from tests.ray_startup import start_ray  # noqa: E402
from tests.workers.service.real_engine import POISON, make_engine  # noqa: E402
from workers.service.engine_spec import EngineSpec  # noqa: E402
from workers.service.grpc_client import WorkerClient  # noqa: E402
from workers.service.grpc_server import WorkerServerConfig  # noqa: E402
from workers.service.ray_actor import start_worker_actor  # noqa: E402
from workers.types import SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ray_local():
    start_ray(
        lambda: ray.init(
            address="local",
            num_cpus=1,
            resources={"specfleet_worker": 1},
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
        )
    )
    yield
    ray.shutdown()


def _serve_once(addresses: dict, prompt: list[int]) -> list[int]:
    with WorkerClient(addresses["grpc"]) as client:
        info = client.info()
        assert info.state == "serving" and info.engine.model_id == "tiny-llama"
        return client.generate({"r": prompt}, SamplingParams(max_tokens=10))["r"].tokens


def _wait_restarted(actor, old_pid: int) -> dict:
    deadline = time.monotonic() + 180
    while True:  # method calls are retried across the restart (max_task_retries=-1)
        try:
            addresses = ray.get(actor.addresses.remote(), timeout=60)
            if addresses["pid"] != old_pid:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.monotonic() < deadline, "actor was not restarted"
        time.sleep(0.5)
    assert ray.get(actor.wait_ready.remote(120), timeout=180)
    return addresses


def test_actor_serves_restarts_after_kill_and_exits_on_shutdown(ray_local) -> None:
    spec = EngineSpec(
        factory="tests.workers.service.real_engine:make_fragile_engine",
        factory_kwargs={"max_batch_size": 4},
    )
    actor = start_worker_actor(
        spec, WorkerServerConfig(host="127.0.0.1", port=0, metrics_port=0), num_cpus=0
    )
    assert ray.get(actor.wait_ready.remote(120), timeout=180)
    first = ray.get(actor.addresses.remote(), timeout=30)
    assert first["node_id"] == ray.get_runtime_context().get_node_id()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    want = make_engine().generate([prompt], SamplingParams(max_tokens=10))[0].tokens
    assert _serve_once(first, prompt) == want

    os.kill(first["pid"], signal.SIGKILL)
    second = _wait_restarted(actor, first["pid"])
    assert _serve_once(second, prompt) == want

    # A fatal engine error ends the process (exit 1), so Ray restarts the actor too.
    with WorkerClient(second["grpc"]) as client, pytest.raises(grpc.RpcError) as err:
        client.generate({"poison": POISON}, SamplingParams(max_tokens=3))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    third = _wait_restarted(actor, second["pid"])
    assert _serve_once(third, prompt) == want

    actor.shutdown.remote(grace=1.0)
    with pytest.raises(ray.exceptions.RayActorError):
        for _ in range(60):  # an intentional exit is final: calls fail instead of restarting
            ray.get(actor.addresses.remote(), timeout=30)
            time.sleep(0.5)
