"""`specfleet worker` / `python -m workers.service`: run one worker standalone, without Ray.

    specfleet worker --model PATH [--drafter ngram|model:PATH] --port 50051 --metrics-port 9464

Secrets come from files or the environment (SPECFLEET_WORKER_TOKEN), never from argv.
Exit codes: 0 after a signal-initiated drain, 1 when the engine failed (let a supervisor
restart it), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from workers.service.engine_spec import EngineSpec, add_engine_args

DEFAULT_PORT = 50051
DEFAULT_METRICS_PORT = 9464
TOKEN_ENV = "SPECFLEET_WORKER_TOKEN"


def build_parser(prog: str = "specfleet worker") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Serve one specfleet engine over gRPC.")
    g = p.add_argument_group("engine")
    add_engine_args(g)
    g.add_argument(
        "--engine-factory", metavar="MODULE:FUNC", help="build the engine by calling this instead"
    )
    g = p.add_argument_group("server")
    g.add_argument(
        "--host", default="127.0.0.1", help="bind address (0.0.0.0 to serve other machines)"
    )
    g.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC port (0 = any free port)")
    g.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help="Prometheus port; -1 disables",
    )
    g.add_argument(
        "--worker-id", default="", help="worker label in metrics and Info (default host:port)"
    )
    g.add_argument(
        "--max-message-mb", type=float, default=16.0, help="gRPC max receive message size"
    )
    g.add_argument(
        "--max-body-mb", type=float, default=64.0, help="msgpack max_buffer_size per body"
    )
    g.add_argument(
        "--max-session-backlog-tokens",
        type=int,
        default=65536,
        help="tokens of events a session's client may leave unread before its stream ends "
        "with RESOURCE_EXHAUSTED",
    )
    g.add_argument(
        "--drain-grace", type=float, default=30.0, help="seconds to finish requests on SIGTERM"
    )
    g = p.add_argument_group("security")
    g.add_argument("--auth-token-file", help=f"file holding the bearer token (or set ${TOKEN_ENV})")
    g.add_argument("--tls-cert", help="server certificate PEM (enables TLS)")
    g.add_argument("--tls-key", help="server private key PEM")
    g.add_argument("--tls-client-ca", help="CA PEM for client certificates (enables mTLS)")
    p.add_argument("--log-level", default="INFO")
    return p


def configs_from_args(args: argparse.Namespace):  # -> tuple[EngineSpec, WorkerServerConfig]
    from protos.grpc_auth import TLSFiles
    from protos.worker_codec import CodecLimits
    from workers.service.grpc_server import WorkerServerConfig

    spec = EngineSpec.from_args(args, factory=args.engine_factory)
    token = (
        Path(args.auth_token_file).read_text().strip()
        if args.auth_token_file
        else os.environ.get(TOKEN_ENV)
    )
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ValueError("--tls-cert and --tls-key must be given together")
        tls = TLSFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    elif args.tls_client_ca:
        raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
    config = WorkerServerConfig(
        host=args.host,
        port=args.port,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        worker_id=args.worker_id,
        model_name=spec.model_name,
        max_receive_message_bytes=int(args.max_message_mb * 1024 * 1024),
        max_session_backlog_tokens=args.max_session_backlog_tokens,
        limits=CodecLimits(max_body_bytes=int(args.max_body_mb * 1024 * 1024)),
        auth_token=token or None,
        tls=tls,
        drain_grace_s=args.drain_grace,
    )
    return spec, config


def worker_main(argv: list[str] | None = None, prog: str = "specfleet worker") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("specfleet.worker")
    try:
        spec, config = configs_from_args(args)
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    from workers.service.grpc_server import WorkerServer

    done = threading.Event()
    failed: list[BaseException] = []

    def on_fatal(error: BaseException) -> None:
        failed.append(error)
        done.set()

    server = WorkerServer(spec.build, config, on_fatal=on_fatal).start()
    # One parseable line for scripts and the cluster launcher.
    print(
        f"specfleet worker {server.worker_id} grpc={server.address} metrics={server.metrics_address}",
        flush=True,
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(0.5):
        pass
    if failed:
        log.error("engine failed, exiting: %r", failed[0])
        server.stop(grace=0)
        return 1
    log.info("draining (up to %.0fs)", config.drain_grace_s)
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
