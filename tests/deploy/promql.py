"""Which metrics and labels a PromQL expression names, checked against what the code exports.

Not a PromQL parser: string literals, label matchers, ranges and grouping clauses are masked
out, and every remaining identifier that is not a function call or keyword is a metric name.
Syntax itself is checked by promtool where it is installed (see test_dashboard.py).
"""

from __future__ import annotations

import re
import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

# Series Prometheus itself adds to every scrape target: not exported by our code.
SYNTHETIC: dict[str, set[str]] = {
    "up": set(),
    "scrape_duration_seconds": set(),
    "scrape_samples_scraped": set(),
}
# Labels Prometheus attaches from the scrape config / target files.
TARGET_LABELS = {"job", "instance"}
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
# Grafana's built-in interval variables, replaced by durations so the text is plain PromQL.
GRAFANA_INTERVALS = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "1m",
    "${__interval}": "1m",
    "$__range": "1h",
    "${__range}": "1h",
}

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{(?P<body>[^{}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_TOKEN = re.compile(
    r"(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]*)"
    r"|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<call>\s*\()?"
)
_LABEL_VALUES = re.compile(
    r"^\s*label_values\((?:(?P<expr>.*),)?\s*(?P<label>[a-zA-Z_]\w*)\s*\)\s*$"
)


def substitute_grafana(expr: str, variables: dict[str, str] | None = None) -> str:
    """Grafana's interval macros -> durations; `$var` / `${var}` -> `variables` (default `.*`)."""
    for macro, duration in GRAFANA_INTERVALS.items():
        expr = expr.replace(macro, duration)
    values = variables or {}
    return re.sub(r"\$\{?([a-zA-Z_]\w*)\}?", lambda m: values.get(m.group(1), ".*"), expr)


def _mask_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Every metric name an expression selects (sample names, with _total/_bucket/... kept)."""
    text = _mask_strings(substitute_grafana(expr))
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for m in _TOKEN.finditer(text):
        ident = m.group("ident")
        if ident and not m.group("call") and ident.lower() not in KEYWORDS:
            names.add(ident)
    return names


def selector_labels(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names in its matchers) for every `name{...}` selector."""
    text = _mask_strings(substitute_grafana(expr))
    return [
        (m.group("name"), set(_MATCHER.findall(m.group("body"))))
        for m in _SELECTOR.finditer(text)
        if m.group("name") and m.group("name").lower() not in KEYWORDS
    ]


def grouping_labels(expr: str) -> set[str]:
    """Label names in by/without/on/ignoring/group_left/group_right clauses."""
    text = _mask_strings(substitute_grafana(expr))
    labels: set[str] = set()
    for body in _GROUPING.findall(text):
        labels.update(x.strip() for x in body.split(",") if x.strip())
    return labels


def check_expr(expr: str, exported: dict[str, set[str]]) -> list[str]:
    """Problems with `expr` against `exported` (sample name -> its label names); [] when fine."""
    known = {**SYNTHETIC, **exported}
    errors = []
    names = metric_names(expr)
    if not names:
        errors.append(f"{expr!r} names no metric")
    for name in sorted(names - known.keys()):
        errors.append(f"{expr!r} names {name!r}, which the code does not export")
    for name, labels in selector_labels(expr):
        bad = labels - known.get(name, set()) - TARGET_LABELS
        if name in known and bad:
            errors.append(f"{expr!r} matches {sorted(bad)} on {name!r}, which has no such label")
    present = set(TARGET_LABELS).union(*(known.get(n, set()) for n in names))
    for label in sorted(grouping_labels(expr) - present):
        errors.append(f"{expr!r} groups by {label!r}, a label none of its metrics has")
    return errors


def check_label_values(query: str, exported: dict[str, set[str]]) -> list[str]:
    """A Grafana `label_values(selector, label)` variable query."""
    m = _LABEL_VALUES.match(query)
    if m is None or not m.group("expr"):
        return [f"variable query {query!r} is not label_values(<selector>, <label>)"]
    errors = check_expr(m.group("expr"), exported)
    label = m.group("label")
    if not any(label in exported.get(n, set()) for n in metric_names(m.group("expr"))):
        errors.append(f"variable query {query!r}: its metric has no label {label!r}")
    return errors


# ------------------------------------------------------------------ what the code exports


def touch_all_children(metrics_owner: object) -> None:
    """Create one child of every labelled metric held by `metrics_owner`, so that the
    exposition shows every sample name and label (a labelled metric without children shows
    only its HELP/TYPE lines). `_labelnames` is prometheus_client's own record of them."""
    for metric in vars(metrics_owner).values():
        if isinstance(metric, MetricWrapperBase) and metric._labelnames:
            metric.labels(*(f"x{i}" for i in range(len(metric._labelnames))))


def samples_from_text(text: str) -> dict[str, set[str]]:
    """Sample name -> label names, from Prometheus text exposition."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def samples_from_registry(registry: CollectorRegistry) -> dict[str, set[str]]:
    return samples_from_text(generate_latest(registry).decode())
