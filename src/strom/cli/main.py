"""The `strom` command: `serve` runs a broker; the other commands are clients of any broker.

Built on typer and rich; the client commands use confluent-kafka (see common.py).
"""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from strom.cli.acl import acl_app
from strom.cli.cluster import cluster_app
from strom.cli.common import reporting_errors, usage_error
from strom.cli.config_cmd import config_app
from strom.cli.console import console
from strom.cli.consume import consume
from strom.cli.dev import dev
from strom.cli.group import group_app
from strom.cli.produce import produce
from strom.cli.quota import quota_app
from strom.cli.topic import topic_app
from strom.cli.txn import txn_app
from strom.cli.user import user_app

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

app = typer.Typer(
    name="strom",
    help="strom: a message broker that speaks the Kafka protocol, and tools to use one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(topic_app)
app.add_typer(group_app)
app.add_typer(cluster_app)
app.add_typer(config_app)
app.add_typer(txn_app)
app.add_typer(user_app)
app.add_typer(acl_app)
app.add_typer(quota_app)
app.command("produce")(produce)
app.command("consume")(consume)
app.command("dev")(dev)
app.command("console")(console)


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def read_config_file(path: Path | None) -> str | None:
    """The config file's text; OSError and bad encodings become one readable message."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise usage_error(f"cannot read config file {str(path)!r}: {reason}") from None


@app.command()
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", metavar="FILE", help="A server.properties-style config file."
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set", "-s", metavar="KEY=VALUE", help="Set one config key (repeatable, wins)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", metavar="DIR", help="Where the logs live (log.dirs)."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option("--listen", metavar="HOST:PORT", help="Address to accept clients on."),
    ] = None,
    node_id: Annotated[
        int | None, typer.Option("--node-id", min=0, metavar="N", help="This node's id.")
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            metavar="HOST:PORT",
            help="Serve Prometheus metrics, /health and /ready over HTTP (metrics.listener).",
        ),
    ] = None,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", help="Logging threshold.")
    ] = LogLevel.INFO,
) -> None:
    """Run a broker until SIGINT or SIGTERM."""
    from strom.config import ConfigError, load_config, shortcut_overrides

    with reporting_errors():
        file_text = read_config_file(config)
        try:
            broker_config = load_config(
                file_text=file_text,
                overrides=list(settings or []),
                shortcuts=shortcut_overrides(
                    str(data_dir) if data_dir is not None else None, listen, node_id, metrics
                ),
            )
        except ConfigError as exc:
            raise usage_error(str(exc)) from None

    logging.basicConfig(
        level=log_level.value.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True
    )
    from strom.server.app import run_server

    raise typer.Exit(run_server(broker_config))


def main() -> None:
    app(prog_name="strom")
