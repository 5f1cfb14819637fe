"""mTLS end to end: the scheduler's links present a client certificate to mTLS workers, the
gateway requires one from clients; a client without a certificate is refused."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from cluster import Client
from cluster.client import SpecfleetError
from cluster.gateway_server import GatewayConfig, GatewayServer
from cluster.worker_rpc import LinkConfig
from protos.grpc_auth import TLSFiles
from tests.cluster.fake_engine import reference
from tests.cluster.test_scheduler import Harness

pytestmark = pytest.mark.timeout(120)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA (openssl CLI) issuing a server cert for 127.0.0.1 and a client cert."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed (needed to generate the test CA)")
    d = tmp_path_factory.mktemp("pki")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    for name, ext in (("server", "san.ext"), ("client", "client.ext")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", f"{name}.pem",
                 cwd=d)  # fmt: skip
    return d


def test_mtls_links_and_gateway(pki: Path) -> None:
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
