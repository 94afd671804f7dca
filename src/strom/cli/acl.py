"""`strom acl list|add|remove`: a cluster's ACLs, strom's counterpart of `kafka-acls.sh`.

It works against any Kafka-compatible broker with an authorizer (authorizer.class.name);
one without answers SECURITY_DISABLED, which is said so. CreateAcls and DeleteAcls go
through confluent-kafka's admin client. DescribeAcls goes through strom's own client
(wire.py): librdkafka drops its error code and answers a broker's refusal, or one without
an authorizer, with an empty list, which would read as "no ACLs".

`add` makes one binding per --operation, as `kafka-acls.sh --add` does, and refuses an
operation the resource type has no use for, as that tool does. `list` and `remove` take
the same options as a filter: an option not given matches anything. `remove` shows what
matches and asks first, on a terminal only, unless --yes. What needs no broker is in
acl_model.py.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from strom.cli.acl_model import (
    ANY_HOST,
    CLUSTER_RESOURCE_NAME,
    LIST_HEADERS,
    NOTHING_MATCHES,
    OPERATION_CHOICES,
    AclCommand,
    AclEntry,
    AclFilter,
    AclOptions,
    acl_error,
    acl_filters,
    acl_rows,
    acl_text,
    add_line,
    bindings_to_add,
    confirm_prompt,
    describe_error,
    describe_request,
    described_entries,
    entry_from,
    removal_filters,
    remove_line,
    sorted_entries,
    unique_failures,
)
from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    ConnectionSettings,
    TimeoutOption,
    admin_client,
    admin_outcome,
    echo_status,
    print_table,
    raise_failures,
    reporting_errors,
    usage_error,
)
from strom.cli.wire import WireSession, run_session

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

acl_app = typer.Typer(
    name="acl",
    help="List, add and remove ACLs (the broker needs an authorizer: authorizer.class.name).",
    no_args_is_help=True,
)

DESCRIBE_ACLS = 29

# --- talking to the broker ---------------------------------------------------------------


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def _connect(
    bootstrap: str, timeout: float, command_config: Path | None
) -> tuple[ConnectionSettings, AdminClient]:
    """An admin client, after the metadata says a broker answers (so an unreachable one
    is reported with its reason, exit code 3)."""
    connection = ConnectionSettings.create(bootstrap, timeout, command_config)
    admin = admin_client(connection)
    connection.metadata(admin)
    return connection, admin


def _admin_binding(entry: AclEntry) -> Any:
    """confluent-kafka's AclBinding: its enums' values are Kafka's codes."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(
        ResourceType(int(entry.resource_type)),
        entry.resource_name,
        ResourcePatternType(int(entry.pattern_type)),
        entry.principal,
        entry.host,
        AclOperation(int(entry.operation)),
        AclPermissionType(int(entry.permission)),
    )


def _admin_filter(acl_filter: AclFilter) -> Any:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # Its name, principal and host are annotated `str`; None matches any, as documented.
    make_filter: Any = AclBindingFilter
    fields = describe_request(acl_filter)
    return make_filter(
        ResourceType(int(fields["resource_type_filter"])),
        fields["resource_name_filter"],
        ResourcePatternType(int(fields["pattern_type_filter"])),
        fields["principal_filter"],
        fields["host_filter"],
        AclOperation(int(fields["operation"])),
        AclPermissionType(int(fields["permission_type"])),
    )


async def _describe_via_wire(
    session: WireSession, filters: Sequence[AclFilter], command: AclCommand
) -> list[AclEntry]:
    found: list[AclEntry] = []
    for acl_filter in filters:
        _, answer = await session.call(
            DESCRIBE_ACLS, "DescribeAcls", describe_request(acl_filter), min_version=1
        )
        failure = describe_error(answer, command)
        if failure is not None:
            raise failure
        found += described_entries(answer)
    return sorted_entries(found)


def describe(
    bootstrap: str,
    timeout: float,
    command_config: Path | None,
    filters: Sequence[AclFilter],
    command: AclCommand,
) -> list[AclEntry]:
    """The bindings any of the filters match, sorted. Through strom's own client:
    librdkafka answers a refused DescribeAcls with an empty list, dropping its error."""
    return run_session(
        bootstrap, timeout, lambda s: _describe_via_wire(s, filters, command), command_config
    )


def create(
    admin: AdminClient, connection: ConnectionSettings, entries: Sequence[AclEntry]
) -> tuple[list[AclEntry], list[CommandError]]:
    """The bindings created, and an error for each that was refused."""
    requested = [(entry, _admin_binding(entry)) for entry in entries]
    futures = admin.create_acls(
        [binding for _, binding in requested], request_timeout=connection.timeout_s
    )
    created: list[AclEntry] = []
    failures: list[CommandError] = []
    for entry, binding in requested:
        _, error = admin_outcome(futures[binding], connection, acl_text(entry))
        if error is None:
            created.append(entry)
        else:
            failures.append(acl_error(connection, error, AclCommand.ADD, acl_text(entry)))
    return created, failures


def delete(
    admin: AdminClient, connection: ConnectionSettings, filters: Sequence[AclFilter]
) -> tuple[list[AclEntry], list[CommandError]]:
    """The bindings deleted, sorted, and an error for each filter that was refused."""
    requested = [_admin_filter(f) for f in dict.fromkeys(filters)]
    futures = admin.delete_acls(requested, request_timeout=connection.timeout_s)
    deleted: list[AclEntry] = []
    failures: list[CommandError] = []
    for acl_filter in requested:
        bindings, error = admin_outcome(futures[acl_filter], connection, "ACLs")
        if error is None:
            deleted += [entry_from(binding) for binding in bindings]
        else:
            failures.append(acl_error(connection, error, AclCommand.REMOVE))
    return sorted_entries(deleted), failures


def confirm_removal(matching: Sequence[AclEntry]) -> bool:
    """Shows what matches on stderr and asks; no answer (end of input) is no."""
    lines, question = confirm_prompt(matching)
    for line in lines:
        echo_status(line)
    try:
        answer: bool = typer.confirm(question, default=False, err=True)
    except typer.Abort:
        echo_status("")
        return False
    return answer


# --- the commands ------------------------------------------------------------------------

TopicOption = Annotated[
    str | None,
    typer.Option("--topic", "-t", metavar="TOPIC", help="A topic.", show_default=False),
]
GroupOption = Annotated[
    str | None,
    typer.Option("--group", "-g", metavar="GROUP", help="A consumer group.", show_default=False),
]
TransactionalIdOption = Annotated[
    str | None,
    typer.Option(
        "--transactional-id", metavar="ID", help="A transactional id.", show_default=False
    ),
]
ClusterOption = Annotated[
    bool, typer.Option("--cluster", help=f"The cluster ({CLUSTER_RESOURCE_NAME}).")
]
LiteralOption = Annotated[
    bool, typer.Option("--literal", help="Exactly the name given (`*`: every name).")
]
PrefixedOption = Annotated[
    bool, typer.Option("--prefixed", help="Every name that starts with the name given.")
]
PrincipalOption = Annotated[
    str | None,
    typer.Option(
        "--principal",
        metavar="TYPE:NAME",
        help="Such as User:alice, or User:* for everyone.",
        show_default=False,
    ),
]
HostFilterOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="HOST",
        help="Only bindings for this host, as written in them (`*`, an address, a range).",
        show_default=False,
    ),
]
OperationsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--operation",
        "-o",
        metavar="OPERATION",
        help=f"Repeatable, in any case: {OPERATION_CHOICES}.",
        show_default=False,
    ),
]
AllowOption = Annotated[bool, typer.Option("--allow", help="ALLOW bindings.")]
DenyOption = Annotated[bool, typer.Option("--deny", help="DENY bindings (DENY wins).")]


@acl_app.command("list")
def list_acls(
    ctx: typer.Context,
    topic: TopicOption = None,
    group: GroupOption = None,
    transactional_id: TransactionalIdOption = None,
    cluster: ClusterOption = False,
    literal: LiteralOption = False,
    prefixed: PrefixedOption = False,
    principal: PrincipalOption = None,
    host: HostFilterOption = None,
    operations: OperationsOption = None,
    allow: AllowOption = False,
    deny: DenyOption = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show ACLs as a table, sorted.

    Every ACL without options; each option given narrows the list. A name matches
    exactly, in either pattern type unless --literal or --prefixed is given. Needs
    DESCRIBE on the cluster."""
    with reporting_errors():
        filters = acl_filters(AclOptions.from_params(ctx.params))
        found = describe(bootstrap, timeout, command_config, filters, AclCommand.LIST)
        if not found:
            unfiltered = all(f.matches_everything for f in filters)
            echo_status("no ACLs" if unfiltered else "no ACLs match")
            return
        print_table(LIST_HEADERS, acl_rows(found))


@acl_app.command("add")
def add(
    ctx: typer.Context,
    topic: TopicOption = None,
    group: GroupOption = None,
    transactional_id: TransactionalIdOption = None,
    cluster: ClusterOption = False,
    literal: LiteralOption = False,
    prefixed: PrefixedOption = False,
    principal: PrincipalOption = None,
    host: Annotated[
        str,
        typer.Option(
            "--host", metavar="HOST", help="The client's host: `*`, an address or a CIDR range."
        ),
    ] = ANY_HOST,
    operations: OperationsOption = None,
    allow: AllowOption = False,
    deny: DenyOption = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Add ACLs: one for each --operation, on one resource, for one principal.

    As kafka-acls.sh --add, for example: strom acl add --allow --principal User:alice
    --operation READ --operation DESCRIBE --topic orders. A name is literal unless
    --prefixed is given. Needs ALTER on the cluster."""
    with reporting_errors():
        entries = bindings_to_add(AclOptions.from_params(ctx.params))
        connection, admin = _connect(bootstrap, timeout, command_config)
        created, failures = create(admin, connection, entries)
        for entry in created:
            print(add_line(entry), flush=True)
        raise_failures(unique_failures(failures))


@acl_app.command("remove")
def remove(
    ctx: typer.Context,
    topic: TopicOption = None,
    group: GroupOption = None,
    transactional_id: TransactionalIdOption = None,
    cluster: ClusterOption = False,
    literal: LiteralOption = False,
    prefixed: PrefixedOption = False,
    principal: PrincipalOption = None,
    host: HostFilterOption = None,
    operations: OperationsOption = None,
    allow: AllowOption = False,
    deny: DenyOption = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Remove without asking.")] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Remove the ACLs the options match (an option not given matches anything).

    Shows them and asks first, which needs a terminal; --yes removes them without asking.
    Prints what the broker removed. Needs ALTER on the cluster."""
    with reporting_errors():
        filters = removal_filters(AclOptions.from_params(ctx.params))
        if not yes and not stdin_is_tty():
            raise usage_error(
                "no terminal to ask on before removing ACLs: add --yes to remove them "
                "without asking"
            )
        if not yes:
            matching = describe(bootstrap, timeout, command_config, filters, AclCommand.REMOVE)
            if not matching:
                echo_status(NOTHING_MATCHES)
                return
            if not confirm_removal(matching):
                echo_status("nothing removed")
                return
        connection, admin = _connect(bootstrap, timeout, command_config)
        deleted, failures = delete(admin, connection, filters)
        for entry in deleted:
            print(remove_line(entry), flush=True)
        if not deleted and not failures:
            echo_status(NOTHING_MATCHES)
        raise_failures(unique_failures(failures))
