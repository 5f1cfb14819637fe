"""`specfleet` command line: up (start a cluster), batch (offline job), worker (one worker).

specfleet up                              # local Ray, 2 workers, embedded default model
specfleet up --batch prompts.jsonl -o results.jsonl   # ... run a batch through it, exit
specfleet up --address auto               # join a Ray cluster: one worker per node with
                                          # the specfleet_worker resource
specfleet batch IN.jsonl -o OUT.jsonl --gateway HOST:PORT
specfleet worker --model PATH --port 50051
specfleet convert FILE.gguf OUT_DIR        # a GGUF file -> an mlx-lm model directory
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import workers
from cluster.batch_inflight import fleet_backend
from cluster.batch_job import BatchJobConfig, BatchSummary, main_with_backend
from workers.service.engine_spec import EngineSpec, add_engine_args

TOKEN_ENV = "SPECFLEET_AUTH_TOKEN"
DEFAULT_MODEL_DIR = Path(workers.__file__).parent / "default_model" / "target"


def _read_token(path: str | None) -> str | None:
    if path:
        return Path(path).read_text().strip() or None
    return os.environ.get(TOKEN_ENV) or None


def _add_client_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("gateway connection")
    g.add_argument("--auth-token-file", help=f"bearer token file (or ${TOKEN_ENV})")
    g.add_argument("--tls-ca", help="CA PEM to trust (enables TLS)")
    g.add_argument("--tls-cert", help="client certificate PEM (mTLS)")
    g.add_argument("--tls-key", help="client key PEM (mTLS)")
    g.add_argument(
        "--retry-timeout-s",
        type=float,
        default=60.0,
        help="keep retrying a request while the gateway is unavailable (default 60)",
    )


def _add_batch_args(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_argument_group("offline batch")
    g.add_argument("-o", "--output", required=required, help="output JSONL (OpenAI Batch format)")
    g.add_argument("--errors", help="error file (default: OUTPUT with .errors.jsonl)")
    g.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight (default: the fleet's batch slots x 1.5, re-read as workers "
        "join or leave)",
    )
    g.add_argument("--summary-json", help="also write the summary as JSON here")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument(
        "--keep-failed",
        action="store_true",
        help="on a re-run, keep earlier failed results (default: serve them again)",
    )
    g.add_argument(
        "--max-retries",
        type=int,
        default=8,
        help="retries per request on a full queue or no worker",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specfleet", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start (or join) a Ray cluster and serve the gateway")
    up.add_argument("--address", help="Ray address to join (e.g. auto); default: start locally")
    up.add_argument("--workers", type=int, help="number of workers (local default 2)")
    add_engine_args(up)
    up.add_argument("--tokenizer", help="tokenizer dir/file (default: the model directory)")
    up.add_argument("--gateway-host", default=None, help="default 127.0.0.1 local, 0.0.0.0 joined")
    up.add_argument("--gateway-port", type=int, default=50050)
    up.add_argument(
        "--http-port",
        type=int,
        help="also serve the OpenAI/Anthropic HTTP API here (0 = any free; default: off)",
    )
    up.add_argument("--metrics-port", type=int, default=0, help="scheduler metrics (0 = any)")
    up.add_argument("--max-queue", type=int, default=4096)
    up.add_argument("--coalesce-ms", type=float, default=3.0)
    up.add_argument("--prometheus-targets-dir", help="keep file_sd targets here (deploy/README)")
    up.add_argument("--tls-server-cert", help="gateway and worker certificate PEM (enables TLS)")
    up.add_argument("--tls-server-key", help="gateway and worker key PEM")
    up.add_argument(
        "--tls-client-ca",
        help="CA PEM for client certificates: gateway and workers require one (mTLS); the "
        "scheduler presents --tls-cert/--tls-key to its workers",
    )
    up.add_argument("--batch", metavar="INPUT", help="run this batch JSONL through, then exit")
    _add_client_args(up)
    _add_batch_args(up, required=False)

    b = sub.add_parser("batch", help="run an OpenAI Batch JSONL file against a running gateway")
    b.add_argument("input")
    b.add_argument("--gateway", default="127.0.0.1:50050", help="gateway address")
    b.add_argument("--ray", action="store_true", help="find the gateway through Ray instead")
    _add_client_args(b)
    _add_batch_args(b, required=True)

    sub.add_parser(
        "worker", help="run one worker standalone (see `specfleet worker -h`)", add_help=False
    )
    sub.add_parser(
        "convert",
        help="convert a GGUF file into an mlx-lm model directory (`specfleet convert -h`)",
        add_help=False,
    )
    sub.add_parser(
        "demo",
        help="the main job on the embedded default model (`specfleet demo -h`)",
        add_help=False,
    )
    return p


def _client(address: str, args: argparse.Namespace) -> Any:
    from cluster.client import Client

    return Client(
        address,
        token=_read_token(args.auth_token_file),
        tls_ca_file=args.tls_ca,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        retry_timeout_s=args.retry_timeout_s,
    )


def spec_counters(metrics_urls: list[str]) -> tuple[int, int]:
    """Fleet totals of (drafts, accepted draft tokens) from the workers' metrics endpoints."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    drafts = accepted = 0.0
    for url in metrics_urls:
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            continue  # a worker being restarted: its counters restart too
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "specfleet_spec_decode_num_drafts_total":
                    drafts += s.value
                elif s.name == "specfleet_spec_decode_num_accepted_tokens_total":
                    accepted += s.value
    return int(drafts), int(accepted)


def _batch(
    address: str, args: argparse.Namespace, input_path: str, metrics_urls: Sequence[str] = ()
) -> int:
    config = BatchJobConfig(
        Path(input_path),
        Path(args.output),
        Path(args.errors) if args.errors else None,
        concurrency=args.concurrency or 64,  # threads of the one-call-per-request path
        progress=not args.no_progress,
        retry_failed=not args.keep_failed,
    )
    with _client(address, args) as client:
        summary_json = Path(args.summary_json) if args.summary_json else None
        backend = fleet_backend(client, args.concurrency, args.max_retries)
        urls = list(metrics_urls)
        before = spec_counters(urls)

        def finish(summary: BatchSummary) -> None:
            after = spec_counters(urls)
            summary.fleet_num_drafts = max(0, after[0] - before[0])
            summary.fleet_num_accepted_tokens = max(0, after[1] - before[1])

        return main_with_backend(config, backend, summary_json, finish if urls else None)


def cmd_batch(args: argparse.Namespace) -> int:
    address = args.gateway
    if args.ray:
        from cluster.ray_actor import gateway_address

        address = gateway_address()
    return _batch(address, args, args.input)


def up_tls(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """TLS of `specfleet up`: (TLSFiles for the gateway and the workers or None, the scheduler's
    LinkConfig TLS fields). The scheduler dials its own TLS workers, so it must trust their CA
    (--tls-ca) and, under mTLS (--tls-client-ca), present a client certificate (--tls-cert/key).
    Raises ValueError naming the missing option instead of starting a fleet that cannot connect.
    """
    from protos.grpc_auth import TLSFiles

    cert, key = args.tls_server_cert, args.tls_server_key
    if not (cert or key):
        if args.tls_client_ca:
            raise ValueError("--tls-client-ca needs --tls-server-cert and --tls-server-key")
        return None, {}
    if not (cert and key):
        raise ValueError("--tls-server-cert and --tls-server-key must be given together")
    if not args.tls_ca:
        raise ValueError(
            "--tls-server-cert needs --tls-ca: the CA PEM that signed it, which the scheduler "
            "trusts when it connects to its TLS workers (for a self-signed certificate, pass "
            "the certificate itself)"
        )
    if args.tls_client_ca and not (args.tls_cert and args.tls_key):
        raise ValueError(
            "--tls-client-ca (mTLS) needs --tls-cert and --tls-key: the client certificate "
            "the scheduler presents to its workers"
        )
    link = {
        "tls_ca_file": args.tls_ca,
        "tls_cert_file": args.tls_cert,
        "tls_key_file": args.tls_key,
    }
    return TLSFiles(cert, key, args.tls_client_ca), link


def cmd_up(args: argparse.Namespace) -> int:
    import ray

    from cluster.gateway_server import GatewayConfig
    from cluster.http import HttpConfig
    from cluster.policy import PolicyConfig
    from cluster.ray_actor import ClusterSpec, start_cluster
    from cluster.runtime import RuntimeConfig
    from cluster.scheduler import SchedulerConfig
    from cluster.worker_rpc import LinkConfig
    from workers.service.grpc_server import WorkerServerConfig
    from workers.service.ray_actor import WORKER_RESOURCE

    tls, link_tls = up_tls(args)  # before Ray starts: a bad combination never half-starts
    local = args.address is None
    n = args.workers if args.workers is not None else (2 if local else None)
    if local:
        ray.init(
            address="local",  # always a fresh local instance, never a stray running cluster
            num_cpus=max(os.cpu_count() or 2, (n or 2) + 1),
            resources={WORKER_RESOURCE: n or 2},
            namespace="specfleet",
            include_dashboard=False,
        )
    else:
        ray.init(address=args.address, namespace="specfleet")
    host = args.gateway_host or ("127.0.0.1" if local else "0.0.0.0")
    token = _read_token(args.auth_token_file)
    tokenizer = args.tokenizer or args.model or str(DEFAULT_MODEL_DIR)
    engine = EngineSpec.from_args(args)
    spec = ClusterSpec(
        engine=engine,
        worker=WorkerServerConfig(
            host="127.0.0.1" if local else "0.0.0.0",
            model_name=engine.model_name,
            auth_token=token,
            tls=tls,
        ),
        actor=RuntimeConfig(
            scheduler=SchedulerConfig(
                PolicyConfig(max_queue=args.max_queue, coalesce_window_s=args.coalesce_ms / 1000)
            ),
            gateway=GatewayConfig(host=host, port=args.gateway_port, auth_token=token, tls=tls),
            http=None
            if args.http_port is None
            else HttpConfig(host=host, port=args.http_port, auth_token=token, tls=tls),
            link=LinkConfig(auth_token=token, **link_tls),
            tokenizer_path=tokenizer,
            metrics_host="127.0.0.1" if local else "0.0.0.0",
            metrics_port=args.metrics_port,
            prometheus_targets_dir=args.prometheus_targets_dir,
            model_name=engine.model_name,
        ),
        num_workers=n,
    )
    print(f"specfleet: starting {n or 'one per node'} worker(s) ...", file=sys.stderr)
    cluster = start_cluster(spec)
    a = cluster.addresses
    print(f"gateway:           {a['gateway']}", file=sys.stderr)
    if a.get("http"):
        print(f"http (OpenAI/Anthropic): {a['http']}/v1", file=sys.stderr)
    print(f"scheduler metrics: {a['metrics']}", file=sys.stderr)
    for wid, w in a["workers"].items():
        print(f"worker {wid}:  grpc {w['grpc']}  metrics {w['metrics']}", file=sys.stderr)
    try:
        if args.batch:
            if not args.output:
                raise SystemExit("--batch needs -o OUTPUT")
            urls = [w["metrics"] for w in a["workers"].values() if w["metrics"]]
            return _batch(a["gateway"], args, args.batch, urls)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        print("serving; Ctrl-C to stop", file=sys.stderr)
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        cluster.shutdown()
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "worker":
        from workers.service.cli import worker_main

        return worker_main(argv[1:])
    if argv and argv[0] == "convert":  # the converter imports mlx: only inside this branch
        from workers.convert.cli import convert_main

        return convert_main(argv[1:])
    if argv and argv[0] == "demo":
        from cluster.demo import main as demo_main

        return demo_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "batch":
        return cmd_batch(args)
    return cmd_up(args)


if __name__ == "__main__":
    raise SystemExit(main())
