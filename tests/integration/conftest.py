"""One `specfleet up --http-port 0` fleet for the whole session, started only by the tests
that ask for it (HTTP API and lean client), stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.http_fleet import UpFleet


@pytest.fixture(scope="session")
def up_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpFleet]:
    fleet = UpFleet(tmp_path_factory.mktemp("up_fleet"))
    try:
        yield fleet
    finally:
        fleet.stop()
