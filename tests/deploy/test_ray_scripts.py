"""deploy/ray: shell scripts, launchd plist and cluster YAML; then a real two-node Ray cluster
started by the scripts, the worker exactly as the plist tells launchd to start it."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import plistlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RAY_DIR = REPO / "deploy" / "ray"
SCRIPTS = ["common.sh", "start_head.sh", "join_worker.sh"]
RAY_BIN = Path(sys.executable).with_name("ray")
PLIST_HOME = "/Users/specfleet/specfleet"  # the checkout path the shipped plist assumes


@pytest.mark.parametrize("name", SCRIPTS)
def test_bash_syntax(name: str) -> None:
    res = subprocess.run(["bash", "-n", str(RAY_DIR / name)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck() -> None:
    res = subprocess.run(
        ["shellcheck", "-x", *SCRIPTS], cwd=RAY_DIR, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _run_script(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": env.pop("HOME", tempfile.gettempdir())}
    return subprocess.run(
        ["bash", str(RAY_DIR / name), *args],
        env={**base, "SPECFLEET_RAY": str(RAY_BIN), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "SPECFLEET_HEAD_ADDRESS"),
        ({"SPECFLEET_HEAD_ADDRESS": "10.0.0.1"}, "HEAD_IP:PORT"),
        ({"SPECFLEET_HEAD_ADDRESS": "10.0.0.1:6379", "SPECFLEET_NODE_IP": "mac-1"}, "IPv4"),
        (
            {
                "SPECFLEET_HEAD_ADDRESS": "10.0.0.1:6379",
                "SPECFLEET_NODE_IP": "10.0.0.2",
                "SPECFLEET_NUM_CPUS": "lots",
            },
            "SPECFLEET_NUM_CPUS=lots",
        ),
        (
            {
                "SPECFLEET_HEAD_ADDRESS": "10.0.0.1:6379",
                "SPECFLEET_NODE_IP": "10.0.0.2",
                "SPECFLEET_RAY": "/nope/ray",
            },
            "SPECFLEET_RAY",
        ),
        # A worker never makes up its own token: it must be the head's.
        (
            {"SPECFLEET_HEAD_ADDRESS": "10.0.0.1:6379", "SPECFLEET_NODE_IP": "10.0.0.2"},
            "auth token",
        ),
        (
            {
                "SPECFLEET_HEAD_ADDRESS": "10.0.0.1:6379",
                "SPECFLEET_NODE_IP": "10.0.0.2",
                "SPECFLEET_RAY_AUTH": "none",
            },
            "SPECFLEET_RAY_AUTH=none",
        ),
    ],
)
def test_join_worker_rejects_bad_settings_before_starting_ray(
    env: dict[str, str], needle: str, tmp_path: Path
) -> None:
    res = _run_script("join_worker.sh", {"HOME": str(tmp_path), **env})
    assert res.returncode == 2, res.stdout + res.stderr
    assert needle in res.stderr and "error" in res.stderr


def test_start_head_rejects_a_bad_port(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "SPECFLEET_NODE_IP": "10.0.0.1", "SPECFLEET_RAY_PORT": "63x"}
    res = _run_script("start_head.sh", env)
    assert res.returncode == 2 and "SPECFLEET_RAY_PORT=63x" in res.stderr


def load_plist() -> dict:
    with (RAY_DIR / "com.specfleet.worker.plist").open("rb") as f:
        return plistlib.load(f)


def test_launchd_plist() -> None:
    p = load_plist()
    assert p["Label"] == "com.specfleet.worker"
    assert p["RunAtLoad"] is True and p["KeepAlive"] is True
    assert p["ThrottleInterval"] >= 10  # don't hammer an unreachable head
    args = p["ProgramArguments"]
    assert args[0] == "/bin/bash" and args[1] == f"{PLIST_HOME}/deploy/ray/join_worker.sh"
    assert "--block" in args  # launchd must own the foreground process to restart it
    env = p["EnvironmentVariables"]
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"
    assert env["SPECFLEET_HOME"] == p["WorkingDirectory"] == PLIST_HOME
    host, port = env["SPECFLEET_HEAD_ADDRESS"].rsplit(":", 1)
    ipaddress.IPv4Address(host)
    assert int(port) == 6379
    path = env["PATH"].split(":")
    assert {"/usr/sbin", "/sbin"} <= set(path)  # route(8) and ipconfig(8) for IP detection
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert p[key].startswith("/Users/specfleet/Library/Logs/"), key
    assert p["SoftResourceLimits"]["NumberOfFiles"] >= 4096


def load_cluster() -> dict:
    return yaml.safe_load((RAY_DIR / "cluster.yaml").read_text())


def test_cluster_yaml_passes_rays_own_validation() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = load_cluster()
    validate_config(prepare_config(copy.deepcopy(cfg)))
    bad = copy.deepcopy(cfg)
    bad["setup_comands"] = bad.pop("setup_commands")  # the validator has teeth
    with pytest.raises(Exception, match="setup_comands"):
        validate_config(prepare_config(bad))


def test_cluster_yaml_uses_the_scripts() -> None:
    cfg = load_cluster()
    provider = cfg["provider"]
    assert provider["type"] == "local"
    ips = [provider["head_ip"], *provider["worker_ips"]]
    assert len(set(ips)) == len(ips)
    for ip in ips:
        ipaddress.IPv4Address(ip)
    assert cfg["min_workers"] == cfg["max_workers"] == len(provider["worker_ips"])
    head = " ".join(cfg["head_start_ray_commands"])
    assert "deploy/ray/start_head.sh" in head
    assert f"SPECFLEET_NODE_IP={provider['head_ip']} " in head
    worker = " ".join(cfg["worker_start_ray_commands"])
    assert (
        "deploy/ray/join_worker.sh" in worker
        and "SPECFLEET_HEAD_ADDRESS=$RAY_HEAD_IP:6379" in worker
    )
    assert "~/.ray/auth_token" in cfg["file_mounts"]  # workers need the head's token


# ------------------------------------------------------------------ a real cluster


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _wait_for_line(log: Path, proc: subprocess.Popen, pattern: str, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} not in {log}:\n{log.read_text()[-3000:]}")


def _assert_gcs_requires(address: str, token: str) -> None:
    """The head's GCS refuses calls without the token (Ray's own auth, switched on by the script)."""
    import grpc

    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo")
        for metadata in ([], [("authorization", "Bearer not-the-token")]):
            with pytest.raises(grpc.RpcError) as err:
                call(b"", metadata=metadata, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert call(b"", metadata=[("authorization", f"Bearer {token}")], timeout=10)


def _stop(proc: subprocess.Popen) -> None:
    # `ray start --block` drains and stops its node's processes on SIGTERM.
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(45)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(240)
def test_scripts_start_a_real_two_node_cluster(tmp_path: Path) -> None:
    # Short temp dir: Ray's unix socket paths must stay under ~107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="sfray."))
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))  # a private token, not the machine's ~/.ray one
    common = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SPECFLEET_RAY": str(RAY_BIN),
        "SPECFLEET_NUM_CPUS": "1",
        "SPECFLEET_OBJECT_STORE_BYTES": str(100 * 2**20),
        "SPECFLEET_RAY_AUTH_TOKEN_FILE": str(token),
    }
    ray_args = [f"--temp-dir={temp}"]  # keeps ray_current_cluster out of /tmp/ray
    head_log, worker_log = temp / "head.log", temp / "worker.log"
    head = subprocess.Popen(
        ["bash", str(RAY_DIR / "start_head.sh"), "--block", "--include-dashboard=false", *ray_args],
        env={**common, "SPECFLEET_RAY_PORT": str(_free_port())},
        stdout=head_log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = None
    try:
        address = _wait_for_line(head_log, head, r"specfleet: Ray head on (\S+:\d+)", 30).group(1)
        _wait_for_line(head_log, head, r"block forever", 90)
        _assert_gcs_requires(address, token.read_text())

        # The worker exactly as launchd would start it, with the plist's paths moved to this checkout.
        plist = load_plist()
        argv = [a.replace(PLIST_HOME, str(REPO)) for a in plist["ProgramArguments"]]
        env = {
            k: v.replace(PLIST_HOME, str(REPO)) for k, v in plist["EnvironmentVariables"].items()
        }
        env["PATH"] = f"{env['PATH']}:{os.environ['PATH']}"
        env["SPECFLEET_HEAD_ADDRESS"] = address
        worker = subprocess.Popen(
            [*argv, *ray_args],
            cwd=plist["WorkingDirectory"].replace(PLIST_HOME, str(REPO)),
            env={**common, **env},
            stdout=worker_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker_ip = _wait_for_line(
            worker_log, worker, r"specfleet: worker (\S+) joining", 30
        ).group(1)
        _wait_for_line(worker_log, worker, r"block forever", 90)

        driver = (
            f"import json, ray; ray.init(address={address!r}, logging_level='ERROR');"
            "print('NODES=' + json.dumps([n for n in ray.nodes() if n['Alive']]))"
        )
        res = subprocess.run(
            [sys.executable, "-c", driver],
            env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        nodes = json.loads(res.stdout.split("NODES=", 1)[1])
        assert len(nodes) == 2
        (w,) = [n for n in nodes if "specfleet_worker" in n["Resources"]]
        assert w["Resources"]["specfleet_worker"] == 1
        assert w["Resources"]["CPU"] == 1
        assert w["NodeManagerAddress"] == worker_ip
        (h,) = [n for n in nodes if n is not w]
        assert "specfleet_worker" not in h["Resources"]  # the head runs no worker by default
    finally:
        if worker is not None:
            _stop(worker)
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)
