"""Issue 13 defect 9: error messages that name the field, and a plaintext client pointed at a TLS
gateway told so at once (it used to retry for minutes and end with "Socket closed")."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from cluster import Client
from cluster.client import InvalidRequestError, SpecfleetError
from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.scheduler import Scheduler
from protos.grpc_auth import TLSFiles
from tests.cluster.test_tls import pki  # noqa: F401  (the test CA fixture)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"max_tokens": 2**40}, "sampling.max_tokens"),
        ({"top_k": 2**33}, "sampling.top_k"),
        ({"priority": 2**40}, "priority"),
    ],
)
def test_out_of_range_value_names_its_field(kw: dict, field: str) -> None:
    c = Client("127.0.0.1:1")  # never dialled: the request is refused while it is built
    try:
        with pytest.raises(InvalidRequestError) as err:
            c.generate("hi", **kw)
        assert err.value.message.startswith(field), err.value.message
        assert str(next(iter(kw.values()))) in err.value.message
    finally:
        c.close()


def test_plaintext_client_at_a_tls_gateway_is_told(pki: Path) -> None:  # noqa: F811
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    tls = TLSFiles(str(pki / "server.pem"), str(pki / "server.key"))
    gw = asyncio.run_coroutine_threadsafe(
        GatewayServer(Scheduler(), GatewayConfig(tls=tls)).start(), loop
    ).result(30)
    try:
        with Client(gw.address, retry_timeout_s=20) as c:
            start = time.monotonic()
            with pytest.raises(SpecfleetError) as err:
                c.generate([1], max_tokens=2)
            assert time.monotonic() - start < 10, "no minutes of retries against a TLS server"
        assert err.value.code == "UNAVAILABLE"
        assert "TLS" in err.value.message and "tls_ca_file" in err.value.message
    finally:
        asyncio.run_coroutine_threadsafe(gw.stop(0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
