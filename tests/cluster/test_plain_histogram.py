"""The scheduler's plain histograms export exactly what prometheus_client's Histogram would for
the same observations (names, buckets, count, sum), so dashboards and alerts see no change."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from cluster.metrics import PlainHistogram, _PlainCollector

BUCKETS = (0.0, 0.05, 0.1, 0.5, 1, 2.5)


def samples(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return sorted(x for x in text.splitlines() if x.startswith("h_") and "_created" not in x)


def test_same_exposition_as_prometheus_histogram() -> None:
    ref_reg, plain_reg = CollectorRegistry(), CollectorRegistry()
    ref = Histogram("h", "doc", buckets=BUCKETS, registry=ref_reg)
    plain = PlainHistogram("h", "doc", BUCKETS)
    plain_reg.register(_PlainCollector([plain]))
    rng = random.Random(3)
    values = [0.0, 0.05, 0.1, 2.5, 7.0] + [rng.uniform(0, 3) for _ in range(200)]
    for v in values:
        ref.observe(v)
        plain.observe(v)
    assert samples(plain_reg) == samples(ref_reg)
    assert plain.count == len(values) and plain_reg.get_sample_value("h_count") == len(values)
