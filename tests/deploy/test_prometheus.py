"""deploy/prometheus: the scrape config, the file_sd targets format, and the dashboard's
queries evaluated by a real Prometheus against real metric endpoints (where one is installed)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client import start_http_server

from cluster.metrics import SchedulerMetrics
from tests.deploy.promql import substitute_grafana
from tests.deploy.test_dashboard import DASHBOARD, expressions, variable_queries
from workers.service.metrics import WorkerMetrics
from workers.types import RequestOutput, RoundStats

PROM = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def load_config() -> dict:
    return yaml.safe_load((PROM / "prometheus.yml").read_text())


def test_config_structure() -> None:
    cfg = load_config()
    assert set(cfg) <= {"global", "scrape_configs", "rule_files", "alerting"}
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    assert len(jobs) == len(cfg["scrape_configs"]), "job names must be unique"
    for name in ("specfleet-workers", "specfleet-scheduler"):
        job = jobs[name]
        # Without honor_labels the target file's worker/model labels would rename the scraped
        # ones to exported_worker/exported_model and every dashboard query would come up empty.
        assert job["honor_labels"] is True
        (sd,) = job["file_sd_configs"]
        for pattern in sd["files"]:
            assert pattern.startswith("targets/") and pattern.endswith(".json"), pattern
    g = cfg["global"]
    assert _seconds(g["scrape_timeout"]) <= _seconds(g["scrape_interval"])


def _seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    assert m, f"unexpected duration {duration!r}"
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def _job_for(filename: str) -> str:
    """Which job's file_sd glob picks up a targets file of this name."""
    import fnmatch

    matches = [
        job["job_name"]
        for job in load_config()["scrape_configs"]
        for sd in job.get("file_sd_configs", [])
        for pattern in sd["files"]
        if fnmatch.fnmatch(f"targets/{filename}", pattern)
    ]
    assert len(matches) == 1, f"targets/{filename} matches jobs {matches}"
    return matches[0]


@pytest.mark.parametrize("name", ["workers.json", "scheduler.json"])
def test_example_targets_follow_the_file_sd_format(name: str) -> None:
    groups = json.loads((PROM / "examples" / name).read_text())
    assert isinstance(groups, list) and groups
    for group in groups:
        assert set(group) <= {"targets", "labels"}
        assert group["targets"] and all(
            re.fullmatch(r"[^:\s]+:\d+", t) for t in group["targets"]
        ), group
        labels = group.get("labels", {})
        assert all(LABEL_NAME.match(k) and isinstance(v, str) for k, v in labels.items())
    if name == "workers.json":
        assert all(set(g["labels"]) == {"worker", "model"} for g in groups)
    _job_for(name)


def test_runtime_targets_are_not_committed() -> None:
    ignore = (PROM / "targets" / ".gitignore").read_text().split()
    assert "*.json" in ignore


def _config_dir(tmp_path: Path, targets: dict[str, list[dict]], scrape_interval: str = "") -> Path:
    """A copy of prometheus.yml with targets/ filled in, as Prometheus would find it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = (PROM / "prometheus.yml").read_text()
    if scrape_interval:  # same jobs and discovery, faster scrapes for the test
        cfg = yaml.safe_load(text)
        cfg["global"]["scrape_interval"] = cfg["global"]["scrape_timeout"] = scrape_interval
        text = yaml.safe_dump(cfg)
    (tmp_path / "prometheus.yml").write_text(text)
    (tmp_path / "targets").mkdir()
    for name, groups in targets.items():
        (tmp_path / "targets" / name).write_text(json.dumps(groups))
    return tmp_path / "prometheus.yml"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_checks_config_and_example_targets(tmp_path: Path) -> None:
    targets = {
        n: json.loads((PROM / "examples" / n).read_text())
        for n in ("workers.json", "scheduler.json")
    }
    res = subprocess.run(
        ["promtool", "check", "config", str(_config_dir(tmp_path / "ok", targets))],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # promtool reads the targets files too: a malformed one fails the check.
    bad = {"workers.json": [{"targets": "10.0.0.1:9101", "labels": {"worker": "w"}}]}
    res = subprocess.run(
        ["promtool", "check", "config", str(_config_dir(tmp_path / "bad", bad))],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "workers" in res.stdout + res.stderr


# ------------------------------------------------------------------ a real Prometheus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = cond()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_real_prometheus_scrapes_file_sd_targets_and_runs_the_dashboard(tmp_path: Path) -> None:
    workers = {
        "mac-1:50051": WorkerMetrics("mac-1:50051", "tiny"),
        "mac-2:50051": WorkerMetrics("mac-2:50051", "tiny"),
    }
    ports = {w: m.serve("127.0.0.1", 0) for w, m in workers.items()}
    scheduler = SchedulerMetrics()
    sched_server, _ = start_http_server(0, addr="127.0.0.1", registry=scheduler.registry)
    # The documented file format, exactly as the scheduler is to write it.
    targets = {
        "workers.json": [
            {"targets": [f"127.0.0.1:{ports[w]}"], "labels": {"worker": w, "model": "tiny"}}
            for w in workers
        ],
        "scheduler.json": [{"targets": [f"127.0.0.1:{sched_server.server_port}"], "labels": {}}],
    }
    web = _free_port()
    base = f"http://127.0.0.1:{web}"
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={_config_dir(tmp_path, targets, scrape_interval='1s')}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
        start_new_session=True,
    )
    try:
        ups = 'up{job=~"specfleet-workers|specfleet-scheduler"} == 1'
        _wait(lambda: len(_query(base, ups)) == 3, 30, "3 targets up")
        # Feed known stats: accepted/drafted differ per worker, so per-worker ratios can be told apart.
        fed = {
            "mac-1:50051": (8, 2, 5),
            "mac-2:50051": (12, 3, 3),
        }  # draft tokens, drafts, accepted
        for w, (draft_tokens, drafts, accepted) in fed.items():
            m = workers[w]
            m.on_request_added("r1", now=0.0)
            m.on_round(
                RoundStats(
                    batch_size=drafts,
                    num_drafts=drafts,
                    num_draft_tokens=draft_tokens,
                    num_accepted_tokens=accepted,
                    accepted_per_pos=[min(drafts, accepted), max(0, accepted - drafts)],
                    time_draft_s=0.001,
                    time_verify_s=0.004,
                    time_compact_s=0.0005,
                )
            )
            m.on_outputs([RequestOutput("r1", [1, 2, 3])], now=0.02)
            m.on_outputs(
                [RequestOutput("r1", [4], finished=True, finish_reason="length")], now=0.03
            )
        scheduler.requeues.inc(2)
        scheduler.worker_restarts.labels("mac-1:50051").inc()
        scheduler.queue_depth.set(7)

        raw = "specfleet_spec_decode_num_accepted_tokens_total"
        series = _wait(
            lambda: (r := _query(base, f"{raw} > 0")) and len(r) == 2 and r, 30, "fed stats scraped"
        )
        for s in series:
            labels = s["metric"]
            assert labels["job"] == "specfleet-workers"
            assert "exported_worker" not in labels and "exported_model" not in labels
            assert float(s["value"][1]) == fed[labels["worker"]][2]
        # The scheduler is a separate target, scraped at its own moments.
        restarts = _wait(
            lambda: _query(base, "specfleet_scheduler_worker_restarts_total > 0"),
            30,
            "scheduler stats scraped",
        )
        assert [r["metric"]["worker"] for r in restarts] == ["mac-1:50051"]
        time.sleep(1.5)  # one more scrape, so every rate() window holds two samples

        # Every dashboard query runs on the real server (syntax, matching, no many-to-many).
        results = {}
        for title, expr in expressions(json.loads(DASHBOARD.read_text())):
            query = substitute_grafana(expr).replace("[1m]", "[30s]").replace("[1h]", "[30s]")
            results[(title, expr)] = _query(base, query)

        # The dashboard's formulas agree with the stats fed in, per worker.
        by_title = {title: res for (title, _), res in results.items()}
        for title, want in (
            ("Acceptance rate per worker", lambda d, n, a: a / d),
            ("Mean acceptance length per worker", lambda d, n, a: 1 + a / n),
        ):
            got = {r["metric"]["worker"]: float(r["value"][1]) for r in by_title[title]}
            assert got.keys() == fed.keys(), title
            for w, stats in fed.items():
                assert got[w] == pytest.approx(want(*stats), rel=1e-9), (title, w)
        assert by_title["Requeues"] and float(by_title["Requeues"][0]["value"][1]) > 0
        assert not [k for k, v in results.items() if k[0] == "Queue depth" and not v]

        for query in variable_queries(json.loads(DASHBOARD.read_text())):
            found = re.match(r"label_values\((.*),\s*(\w+)\)$", substitute_grafana(query))
            assert found, query
            selector, label = found.groups()
            url = f"{base}/api/v1/label/{label}/values?" + urllib.parse.urlencode(
                {"match[]": selector}
            )
            with urllib.request.urlopen(url, timeout=10) as resp:
                values = json.load(resp)["data"]
            assert values == (sorted(workers) if label == "worker" else ["tiny"]), query
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for m in workers.values():
            m.close()
        sched_server.shutdown()
        sched_server.server_close()
