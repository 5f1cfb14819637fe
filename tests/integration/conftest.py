"""A `specfleet up --http-port 0` fleet per test module that asks for one (HTTP API, lean
client), stopped when the module ends so no idle Ray cluster outlives it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.http_fleet import UpFleet


@pytest.fixture(scope="module")
def up_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpFleet]:
    fleet = UpFleet(tmp_path_factory.mktemp("up_fleet"))
    try:
        yield fleet
    finally:
        fleet.stop()
