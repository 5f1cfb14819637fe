"""mTLS end to end: the scheduler's links present a client certificate to mTLS workers, the
gateway requires one from clients; a client without a certificate is refused."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from cluster import Client
from cluster.client import SpecfleetError
from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.worker_rpc import LinkConfig
from tests.cluster.fake_engine import reference
from tests.cluster.test_scheduler import Harness
from tests.workers.service.test_auth_tls import pki  # noqa: F401 - the test CA fixture
from workers.service.grpc_auth import TLSFiles

pytestmark = pytest.mark.timeout(120)


def test_mtls_links_and_gateway(pki: Path) -> None:  # noqa: F811
    server_tls = TLSFiles(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem"))
    link = LinkConfig(
        tls_ca_file=str(pki / "ca.pem"),
        tls_cert_file=str(pki / "client.pem"),
        tls_key_file=str(pki / "client.key"),
        reconnect_s=0.05,
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    h = Harness(n=1, worker_tls=server_tls, link=link)

    async def up() -> GatewayServer:
        await h.__aenter__()
        return await GatewayServer(h.sched, GatewayConfig(tls=server_tls)).start()

    gw = call(up())
    try:
        assert h.sched.workers["w0"].connected, "link must complete the mTLS handshake"
        good = Client(
            gw.address,
            tls_ca_file=str(pki / "ca.pem"),
            tls_cert_file=str(pki / "client.pem"),
            tls_key_file=str(pki / "client.key"),
        )
        assert good.generate([5, 5], max_tokens=4).tokens == reference([5, 5], 4)
        good.close()
        no_cert = Client(gw.address, tls_ca_file=str(pki / "ca.pem"), retry_timeout_s=0.5)
        with pytest.raises(SpecfleetError) as err:
            no_cert.generate([5], max_tokens=2)
        assert err.value.code == "UNAVAILABLE"  # handshake refused
        no_cert.close()
    finally:
        call(gw.stop(0.5))
        call(h.__aexit__())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
