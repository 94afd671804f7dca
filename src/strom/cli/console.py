"""`strom console`: serve the web console (strom.console) for a Kafka-compatible cluster."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    TimeoutOption,
    reporting_errors,
    usage_error,
)
from strom.cli.wire import format_address

DEFAULT_LISTEN = "127.0.0.1:8080"


def console(
    listen: Annotated[
        str,
        typer.Option("--listen", metavar="HOST:PORT", help="Address to serve the console on."),
    ] = DEFAULT_LISTEN,
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics",
            metavar="URL",
            help="A broker's Prometheus endpoint, e.g. http://host:9100/metrics, for live "
            "throughput charts (repeatable: one per broker).",
        ),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    command_config: CommandConfigOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Serve a web console for the cluster: brokers and quorum, topics, a message browser,
    consumer groups, ACLs and users. It speaks only the Kafka protocol to the cluster, so it
    works with any Kafka-compatible broker."""
    from strom.config import ConfigError
    from strom.config.listeners import parse_host_port

    with reporting_errors():
        try:
            host, port = parse_host_port(listen, key="--listen")
        except ConfigError as exc:
            raise usage_error(str(exc)) from None
        for url in metrics or []:
            if not url.startswith(("http://", "https://")):
                raise usage_error(f"--metrics {url!r}: give an http:// or https:// URL")
        serve_console(host, port, bootstrap, timeout, command_config, metrics or [])


def serve_console(
    host: str,
    port: int,
    bootstrap: str,
    timeout_s: float,
    command_config: Path | None,
    metrics: list[str],
) -> None:
    from strom.console.backend import ClusterBackend
    from strom.console.feed import MetricsFeed
    from strom.console.server import Console, make_server

    backend = ClusterBackend(bootstrap, timeout_s, command_config)
    feed = MetricsFeed(metrics)
    shell = Console(backend, feed)
    try:
        server = make_server(host, port, shell)
    except OSError as exc:
        raise usage_error(
            f"cannot listen on {format_address(host, port)}: {exc.strerror}"
        ) from None
    bound_host, bound_port = server.server_address[:2]
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    feed.start()
    address = format_address(str(bound_host), int(bound_port))
    print(
        f"strom console on http://{address}/ for the cluster at {bootstrap}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        feed.stop()
        shell.searches.cancel_all()
        server.server_close()
        backend.close()
