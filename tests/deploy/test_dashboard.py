"""The Grafana dashboard names only metrics and labels that the code really exports.

The exported names come from the real registries: a WorkerMetrics scraped over its own HTTP
endpoint and a SchedulerMetrics rendered by prometheus_client, with one child of every labelled
metric created so that every sample name and label shows up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.metrics import SchedulerMetrics
from tests.deploy.promql import (
    check_expr,
    check_label_values,
    grouping_labels,
    metric_names,
    samples_from_registry,
    samples_from_text,
    scrape,
    selector_labels,
    substitute_grafana,
    touch_all_children,
)
from workers.service.metrics import WorkerMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "specfleet.json"


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    worker = WorkerMetrics(worker="mac-1:50051", model="tiny")
    touch_all_children(worker)
    port = worker.serve("127.0.0.1", 0)
    try:
        samples = samples_from_text(scrape(f"http://127.0.0.1:{port}/metrics"))
    finally:
        worker.close()
    scheduler = SchedulerMetrics()
    touch_all_children(scheduler)
    overlap = samples.keys() & samples_from_registry(scheduler.registry).keys()
    assert not overlap, f"worker and scheduler export the same series: {overlap}"
    samples.update(samples_from_registry(scheduler.registry))
    return samples


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside collapsed rows
    return out


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    return [
        (p["title"], t["expr"])
        for p in panels(dashboard)
        for t in p.get("targets", [])
        if "expr" in t
    ]


def variable_queries(dashboard: dict) -> list[str]:
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


# --------------------------------------------------------------- the extractor itself


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.9, sum by (le, phase) (rate(a_bucket{worker=~"$worker", '
            'phase!="x{y}"}[$__rate_interval])))',
            {"a_bucket"},
        ),
        ("1 + sum(rate(a_total[5m])) / sum(rate(b_total[5m] offset 1h))", {"a_total", "b_total"}),
        ('label_replace(a, "dst", "$1", "src", "(not_a_metric)")', {"a"}),
        ("a and on(worker) group_left(model) b > bool 0.5e3", {"a", "b"}),
        ("sum without (position) (increase(c[$__range])) / scalar(sum(d))", {"c", "d"}),
        ('count_values("version", build_info) or vector(1)', {"build_info"}),
        ("max_over_time(rate(a[5m])[1h:1m])", {"a"}),
    ],
)
def test_metric_names_table(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_labels_are_extracted() -> None:
    expr = 'sum by (le) (rate(a_bucket{worker=~"$w", model!="m,x=y"}[1m])) / on (job) b{phase="p"}'
    assert selector_labels(expr) == [("a_bucket", {"worker", "model"}), ("b", {"phase"})]
    assert grouping_labels(expr) == {"le", "job"}


# --------------------------------------------------------------- the check has teeth


def test_check_rejects_a_metric_the_code_does_not_export(exported) -> None:
    errors = check_expr("sum(rate(specfleet_spec_decode_num_rejected_tokens_total[5m]))", exported)
    assert errors and "specfleet_spec_decode_num_rejected_tokens_total" in errors[0]


def test_check_rejects_a_counter_without_its_total_suffix(exported) -> None:
    # The family is `specfleet_generation_tokens`, but Prometheus only ever sees `_total`.
    assert check_expr("rate(specfleet_generation_tokens[5m])", exported)
    assert not check_expr("rate(specfleet_generation_tokens_total[5m])", exported)


def test_check_rejects_labels_the_metric_does_not_have(exported) -> None:
    # The scheduler's queue depth is fleet-wide: filtering it by worker gives an empty panel.
    assert check_expr('specfleet_scheduler_queue_depth{worker=~"$worker"}', exported)
    assert check_expr("sum by (phase) (rate(specfleet_generation_tokens_total[5m]))", exported)
    assert check_label_values("label_values(specfleet_scheduler_queue_depth, model)", exported)


def test_check_accepts_histogram_series_and_target_labels(exported) -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, job) "
        '(rate(specfleet_time_to_first_token_seconds_bucket{instance="h:1"}[5m])))'
    )
    assert check_expr(expr, exported) == []


# --------------------------------------------------------------- the dashboard


def test_every_dashboard_expression_names_exported_metrics(dashboard, exported) -> None:
    exprs = expressions(dashboard)
    assert len(exprs) >= 20
    errors = [f"[{title}] {e}" for title, expr in exprs for e in check_expr(expr, exported)]
    for query in variable_queries(dashboard):
        errors += [f"[variable] {e}" for e in check_label_values(query, exported)]
    assert not errors, "\n".join(errors)


# Each topic the dashboard must cover, as the metrics that must appear together in one query.
REQUIRED = {
    "acceptance rate": {
        "specfleet_spec_decode_num_accepted_tokens_total",
        "specfleet_spec_decode_num_draft_tokens_total",
    },
    "mean acceptance length": {
        "specfleet_spec_decode_num_accepted_tokens_total",
        "specfleet_spec_decode_num_drafts_total",
    },
    "acceptance by position": {
        "specfleet_spec_decode_num_accepted_tokens_per_pos_total",
        "specfleet_spec_decode_num_drafts_total",
    },
    "generated tokens/s": {"specfleet_generation_tokens_total"},
    "TTFT": {"specfleet_time_to_first_token_seconds_bucket"},
    "inter-token latency": {"specfleet_inter_token_latency_seconds_bucket"},
    "queue depth": {"specfleet_scheduler_queue_depth"},
    "queue time": {"specfleet_scheduler_queue_time_seconds_bucket"},
    "scheduler batch size": {
        "specfleet_scheduler_batch_size_sum",
        "specfleet_scheduler_batch_size_count",
    },
    "padding ratio": {
        "specfleet_scheduler_padding_ratio_sum",
        "specfleet_scheduler_padding_ratio_count",
    },
    "requeues": {"specfleet_scheduler_requeues_total"},
    "restarts": {"specfleet_scheduler_worker_restarts_total"},
    "round duration": {"specfleet_round_duration_seconds_bucket"},
}


@pytest.mark.parametrize("topic", sorted(REQUIRED))
def test_dashboard_covers(topic: str, dashboard) -> None:
    assert any(REQUIRED[topic] <= metric_names(e) for _, e in expressions(dashboard)), topic


@pytest.mark.parametrize("metric", ["time_to_first_token_seconds", "inter_token_latency_seconds"])
def test_latency_percentiles(metric: str, dashboard) -> None:
    quantiles = {
        e.split("histogram_quantile(")[1].split(",")[0]
        for _, e in expressions(dashboard)
        if f"specfleet_{metric}_bucket" in e and "histogram_quantile(" in e
    }
    assert quantiles == {"0.5", "0.9", "0.99"}


def test_ratios_use_the_documented_formulas(dashboard) -> None:
    exprs = {title: e for title, e in expressions(dashboard)}
    length = exprs["Mean acceptance length per worker"].replace(" ", "")
    assert length.startswith("1+") and "num_accepted_tokens_total" in length.split("/")[0]
    assert "num_drafts_total" in length.split("/")[1]
    rate = exprs["Acceptance rate per worker"].split("/")
    assert "num_accepted_tokens_total" in rate[0] and "num_draft_tokens_total" in rate[1]


def test_dashboard_structure(dashboard) -> None:
    ps = panels(dashboard)
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "worker", "model"} <= names
    cells: set[tuple[int, int]] = set()
    for p in ps:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
    used: set[str] = set()
    for _, e in expressions(dashboard):
        used.update(v for v in ("$worker", "$model") if v in e)
    assert used == {"$worker", "$model"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_parses_every_expression(dashboard, tmp_path) -> None:
    """Each expression (Grafana variables substituted) as a recording rule for promtool."""

    def check(exprs: list[str]) -> subprocess.CompletedProcess:
        rules = {
            "groups": [
                {
                    "name": "dashboard",
                    "rules": [
                        {"record": f"dashboard:expr_{i}", "expr": substitute_grafana(e)}
                        for i, e in enumerate(exprs)
                    ],
                }
            ]
        }
        path = tmp_path / "rules.yml"
        path.write_text(yaml.safe_dump(rules))
        return subprocess.run(
            ["promtool", "check", "rules", str(path)], capture_output=True, text=True
        )

    res = check([e for _, e in expressions(dashboard)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert check(["sum(rate(x[5m])"]).returncode != 0  # promtool does reject bad PromQL
