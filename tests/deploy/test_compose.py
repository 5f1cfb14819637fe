"""deploy/compose.yaml and Grafana provisioning: Docker can't run here, so check the compose file's
shape and that its mounts, the Prometheus config and the Grafana provisioning agree."""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICE_KEYS = {
    "image", "command", "ports", "volumes", "environment", "depends_on", "restart", "extra_hosts",
}  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def mounts(service: dict) -> dict[str, str]:
    """Container path -> host source (relative to deploy/) or named volume."""
    out = {}
    for spec in service.get("volumes", []):
        assert isinstance(spec, str), "use the short volume syntax"
        parts = spec.split(":")
        assert len(parts) in (2, 3) and parts[2:] in ([], ["ro"], ["rw"]), spec
        out[parts[1]] = parts[0]
    return out


def host_file(source: str) -> Path:
    assert source.startswith("./"), f"bind mounts are relative to deploy/: {source}"
    return DEPLOY / source[2:]


def mounted_source(service: dict, container_path: str) -> Path:
    """The host path behind `container_path`, through the longest mount prefix."""
    best = max(
        (c for c in mounts(service) if container_path == c or container_path.startswith(c + "/")),
        key=len,
        default=None,
    )
    assert best is not None, f"{container_path} is not mounted"
    return host_file(mounts(service)[best]) / PurePosixPath(container_path).relative_to(best)


def test_compose_shape(compose) -> None:
    assert set(compose) <= {"name", "services", "volumes"}
    assert set(compose["services"]) == {"prometheus", "grafana"}
    named = set(compose.get("volumes", {}))
    for name, svc in compose["services"].items():
        assert set(svc) <= SERVICE_KEYS, f"{name}: unknown keys {set(svc) - SERVICE_KEYS}"
        image, _, tag = svc["image"].rpartition(":")
        assert image and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: pin a version"
        for port in svc.get("ports", []):
            # Neither service has auth in front of it: loopback only.
            assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), f"{name}: {port}"
        for target, source in mounts(svc).items():
            assert target.startswith("/")
            if source.startswith("./"):
                assert host_file(source).exists(), f"{name}: {source} missing"
            else:
                assert source in named, f"{name}: volume {source} not declared"
        for dep in svc.get("depends_on", []):
            assert dep in compose["services"]


def test_prometheus_mounts_match_its_config(compose) -> None:
    prom = compose["services"]["prometheus"]
    flags = dict(f.split("=", 1) for f in prom["command"])
    config = flags["--config.file"]
    assert mounted_source(prom, config) == DEPLOY / "prometheus" / "prometheus.yml"
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    globs = [
        p
        for job in cfg["scrape_configs"]
        for sd in job.get("file_sd_configs", [])
        for p in sd["files"]
    ]
    assert globs
    for pattern in globs:
        # Prometheus resolves relative file_sd paths against the config file's folder.
        in_container = posixpath.join(posixpath.dirname(config), pattern)
        folder = posixpath.dirname(in_container)
        assert mounted_source(prom, folder) == DEPLOY / "prometheus" / "targets"
        for example in (DEPLOY / "prometheus" / "examples").glob("*.json"):
            if fnmatch.fnmatch(example.name, posixpath.basename(pattern)):
                break
        else:
            raise AssertionError(f"no example targets file for {pattern}")
    assert mounts(prom)[flags["--storage.tsdb.path"]] == "prometheus-data"  # a named volume


def test_grafana_provisioning_points_at_the_mounts(compose) -> None:
    grafana = compose["services"]["grafana"]
    prov = mounted_source(grafana, "/etc/grafana/provisioning")
    assert prov == DEPLOY / "grafana" / "provisioning"

    (ds,) = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert ds["type"] == "prometheus"
    url = urlparse(ds["url"])
    assert url.hostname in compose["services"]
    prom_ports = {p.rsplit(":", 1)[1] for p in compose["services"][url.hostname]["ports"]}
    assert str(url.port) in prom_ports
    prom_cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    # Grafana's $__rate_interval assumes this scrape interval.
    assert ds["jsonData"]["timeInterval"] == prom_cfg["global"]["scrape_interval"]

    (provider,) = yaml.safe_load((prov / "dashboards" / "specfleet.yml").read_text())["providers"]
    assert provider["type"] == "file"
    dashboards = mounted_source(grafana, provider["options"]["path"])
    assert dashboards == DEPLOY / "grafana" / "dashboards"
    found = {json.loads(p.read_text())["uid"] for p in dashboards.glob("*.json")}
    assert "specfleet" in found

    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert mounted_source(grafana, home).is_file()
    password = grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${") and ":?" in password, "no default admin password"
