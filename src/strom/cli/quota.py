"""`strom quota get|set`: client quotas by user, client id and IP, strom's counterpart of
`kafka-configs.sh --entity-type users|clients|ips --describe|--alter`.

librdkafka (and so confluent-kafka) has no DescribeClientQuotas or AlterClientQuotas, so
these commands speak the Kafka protocol through strom's own client (wire.py), secured as
--command-config says; they work against any Kafka-compatible broker. The broker checks
keys and values with Kafka's rules and messages. The brokers slow a client
over its byte rates or request quota (docs/security.md, "Client quotas").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    TimeoutOption,
    echo_status,
    print_table,
    raise_failures,
    reporting_errors,
)
from strom.cli.quota_model import (
    HEADERS,
    KEYS,
    EntityChoice,
    alter_errors,
    alter_request,
    describe_error,
    describe_request,
    entity_label,
    entity_parts,
    filter_components,
    parse_changes,
    quota_rows,
    value_text,
)
from strom.cli.wire import WireSession, run_session

quota_app = typer.Typer(
    name="quota",
    help="Show and change client quotas by user, client id and IP.",
    no_args_is_help=True,
)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

UserOption = Annotated[
    str | None,
    typer.Option(
        "--user", metavar="USER", help="A user (its principal's name).", show_default=False
    ),
]
UserDefaultOption = Annotated[
    bool, typer.Option("--user-default", help="The default of every user without its own.")
]
ClientIdOption = Annotated[
    str | None,
    typer.Option("--client-id", metavar="ID", help="A client id.", show_default=False),
]
ClientIdDefaultOption = Annotated[
    bool, typer.Option("--client-id-default", help="The default of every client id.")
]
IpOption = Annotated[
    str | None,
    typer.Option(
        "--ip", metavar="IP", help="An IP address (connection_creation_rate).", show_default=False
    ),
]
IpDefaultOption = Annotated[
    bool, typer.Option("--ip-default", help="The default of every IP address.")
]


def _describe(
    bootstrap: str,
    timeout: float,
    command_config: Path | None,
    components: list[dict[str, object]],
    strict: bool,
) -> list[tuple[str, str, str]]:
    async def work(session: WireSession) -> list[tuple[str, str, str]]:
        _, answer = await session.call(
            DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", describe_request(components, strict)
        )
        failure = describe_error(answer)
        if failure is not None:
            raise failure
        return quota_rows(answer)

    return run_session(bootstrap, timeout, work, command_config)


@quota_app.command("get")
def get(
    user: UserOption = None,
    user_default: UserDefaultOption = False,
    client_id: ClientIdOption = None,
    client_id_default: ClientIdDefaultOption = False,
    ip: IpOption = None,
    ip_default: IpDefaultOption = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Only entities of exactly the types given (without it, --user alice also "
            "shows alice's client ids).",
        ),
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show client quotas as a table: every quota without options, else those of the
    entities the options match. Needs DESCRIBE_CONFIGS on the cluster."""
    with reporting_errors():
        components = filter_components(
            EntityChoice(user, user_default),
            EntityChoice(client_id, client_id_default),
            EntityChoice(ip, ip_default),
        )
        rows = _describe(bootstrap, timeout, command_config, components, strict)
        if not rows:
            echo_status("no client quotas" if not components else "no client quotas match")
            return
        print_table(HEADERS, rows)


@quota_app.command("set")
def set_quota(
    settings: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="KEY=VALUE",
            help=f"Quotas to set: {', '.join(KEYS)}.",
            show_default=False,
        ),
    ] = None,
    removals: Annotated[
        list[str] | None,
        typer.Option(
            "--remove", metavar="KEY", help="Remove this quota (repeatable).", show_default=False
        ),
    ] = None,
    user: UserOption = None,
    user_default: UserDefaultOption = False,
    client_id: ClientIdOption = None,
    client_id_default: ClientIdDefaultOption = False,
    ip: IpOption = None,
    ip_default: IpDefaultOption = False,
    validate_only: Annotated[
        bool, typer.Option("--validate-only", help="Have the broker check it, change nothing.")
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Set or remove quotas of one entity: a user, a client id, both (a client id of one
    user), or an IP, each by name or its default. Needs ALTER_CONFIGS on the cluster.

    strom quota set --user alice --client-id app producer_byte_rate=1048576"""
    with reporting_errors():
        parts = entity_parts(
            EntityChoice(user, user_default),
            EntityChoice(client_id, client_id_default),
            EntityChoice(ip, ip_default),
        )
        changes = parse_changes(settings or [], removals or [])

        async def work(session: WireSession) -> None:
            _, answer = await session.call(
                ALTER_CLIENT_QUOTAS,
                "AlterClientQuotas",
                alter_request(parts, changes, validate_only),
            )
            raise_failures(alter_errors(answer))

        run_session(bootstrap, timeout, work, command_config)
        label = entity_label(parts)
        verb = "would set" if validate_only else "set"
        for change in changes:
            if change.value is None:
                line = f"{'would remove' if validate_only else 'removed'} {change.key} of {label}"
            else:
                line = f"{verb} {change.key}={value_text(change.value)} for {label}"
            print(line, flush=True)
