"""Issue 13 defects 6 and 7: `specfleet up` TLS options. A server certificate without --tls-ca
used to start a fleet whose scheduler dialled its TLS workers in plaintext and never became
ready; mTLS had no client-CA option and no client certificate on the scheduler's links."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cluster.cli import build_parser, up_tls
from cluster.worker_rpc import LinkConfig
from tests.cluster.test_scheduler import Harness
from tests.cluster.test_tls import pki  # noqa: F401  (the test CA fixture)

pytestmark = pytest.mark.timeout(120)


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["up", *argv])


def test_server_cert_without_ca_is_refused(pki: Path) -> None:  # noqa: F811
    cert, key = str(pki / "server.pem"), str(pki / "server.key")
    with pytest.raises(ValueError, match="--tls-server-cert needs --tls-ca"):
        up_tls(parse("--tls-server-cert", cert, "--tls-server-key", key))
    with pytest.raises(ValueError, match="together"):
        up_tls(parse("--tls-server-cert", cert))
    with pytest.raises(ValueError, match="needs --tls-cert and --tls-key"):
        up_tls(parse("--tls-server-cert", cert, "--tls-server-key", key,
                     "--tls-ca", str(pki / "ca.pem"), "--tls-client-ca", str(pki / "ca.pem")))  # fmt: skip
    assert up_tls(parse()) == (None, {})


def test_up_mtls_options_connect_the_scheduler_to_mtls_workers(pki: Path) -> None:  # noqa: F811
    tls, link = up_tls(
        parse(
            "--tls-server-cert",
            str(pki / "server.pem"),
            "--tls-server-key",
            str(pki / "server.key"),
            "--tls-ca",
            str(pki / "ca.pem"),
            "--tls-client-ca",
            str(pki / "ca.pem"),
            "--tls-cert",
            str(pki / "client.pem"),
            "--tls-key",
            str(pki / "client.key"),
        )  # fmt: skip
    )
    assert tls.client_ca_file == str(pki / "ca.pem")  # workers and gateway require client certs

    async def connects() -> bool:
        h = Harness(n=1, worker_tls=tls, link=LinkConfig(reconnect_s=0.05, **link))
        await h.__aenter__()
        try:
            return h.sched.workers["w0"].connected
        finally:
            await h.__aexit__()

    assert asyncio.run(connects()), "the scheduler's link must complete the mTLS handshake"
