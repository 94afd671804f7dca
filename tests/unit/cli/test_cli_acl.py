"""`strom acl list|add|remove` without a broker: Kafka's codes, options as bindings and
filters, DescribeAcls' fields and answers, table rows, result lines, error messages, and
the commands stopped where they would connect."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation as ConfluentOperation,
)
from confluent_kafka.admin import (
    AclPermissionType as ConfluentPermission,
)
from confluent_kafka.admin import (
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from typer.testing import CliRunner

import strom.cli.acl as acl_cli
from strom.cli.acl_model import (
    NO_AUTHORIZER_MESSAGE,
    OPERATION_CHOICES,
    OPERATIONS,
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
    check_principal,
    confirm_prompt,
    describe_error,
    describe_request,
    described_entries,
    entry_from,
    parse_operation,
    parse_operations,
    removal_filters,
    remove_line,
    unique_failures,
)
from strom.cli.common import CommandError, ConnectionSettings, ExitCode
from strom.cli.main import app
from strom.security.operations import (
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    from_code,
)

runner = CliRunner()
Op, Kind, Pattern, Permission = AclOperation, AclResourceType, PatternType, AclPermissionType
SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST = 54, 31, 42


def connection() -> ConnectionSettings:
    return ConnectionSettings.create("127.0.0.1:9092", 5.0)


def entry(
    name: str = "orders",
    operation: AclOperation = Op.READ,
    *,
    kind: AclResourceType = Kind.TOPIC,
    pattern: PatternType = Pattern.LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    permission: AclPermissionType = Permission.ALLOW,
) -> AclEntry:
    return AclEntry(kind, name, pattern, principal, host, operation, permission)


def grant(**options: Any) -> AclOptions:
    """`add`'s options for alice's READ on topic orders, changed by `options`."""
    base: dict[str, Any] = {
        "topic": "orders",
        "allow": True,
        "principal": "User:alice",
        "operations": ("READ",),
    }
    return AclOptions(**(base | options))


# --- Kafka's codes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "confluents"),
    [
        (AclResourceType, ResourceType),
        (AclOperation, ConfluentOperation),
        (PatternType, ResourcePatternType),
        (AclPermissionType, ConfluentPermission),
    ],
)
def test_confluent_kafkas_enums_carry_the_same_codes(ours: Any, confluents: Any) -> None:
    for member in confluents:
        name = "CLUSTER" if member.name == "BROKER" else member.name
        assert ours[name] == member.value


def test_the_operations_a_binding_may_name() -> None:
    assert [op.name for op in OPERATIONS] == OPERATION_CHOICES.split(", ")
    assert len(OPERATIONS) == 11 and Op.ALL in OPERATIONS and Op.ANY not in OPERATIONS


def test_an_unknown_code_is_unknown() -> None:
    assert (from_code(Op, 3), from_code(Op, 99), from_code(Kind, 7)) == (Op.READ, 0, Kind.USER)


# --- options -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "operation"),
    [
        ("READ", Op.READ),
        ("read", Op.READ),
        ("Write", Op.WRITE),
        ("ClusterAction", Op.CLUSTER_ACTION),
        ("cluster_action", Op.CLUSTER_ACTION),
        ("describe-configs", Op.DESCRIBE_CONFIGS),
        (" IdempotentWrite ", Op.IDEMPOTENT_WRITE),
        ("all", Op.ALL),
    ],
)
def test_operations_are_kafkas_names_in_any_case(text: str, operation: AclOperation) -> None:
    assert parse_operation(text) is operation


@pytest.mark.parametrize("text", ["FLY", "", "ANY", "UNKNOWN", "CREATE_TOKENS", "READ WRITE"])
def test_an_unknown_operation_is_a_usage_error_naming_the_option(text: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_operation(text)
    assert info.value.exit_code is ExitCode.USAGE
    assert info.value.message == f"--operation {text!r}: expected one of {OPERATION_CHOICES}"


def test_operations_may_be_comma_separated_and_count_once() -> None:
    assert parse_operations(["read,WRITE", "Read", "describe"]) == [Op.READ, Op.WRITE, Op.DESCRIBE]
    assert parse_operations([]) == []


@pytest.mark.parametrize("principal", ["User:alice", "User:*", "Group:ops:eu"])
def test_a_principal_is_type_and_name(principal: str) -> None:
    assert check_principal(principal) == principal


@pytest.mark.parametrize("principal", ["alice", "User:", ":alice", " : ", ""])
def test_a_principal_without_type_or_name_is_refused(principal: str) -> None:
    with pytest.raises(CommandError) as info:
        check_principal(principal)
    assert info.value.exit_code is ExitCode.USAGE
    assert info.value.message == (
        f"--principal {principal!r}: expected TYPE:NAME, such as User:alice"
    )


def test_add_makes_one_binding_per_operation() -> None:
    assert bindings_to_add(grant(operations=("read", "write,READ"))) == [
        entry(operation=Op.READ),
        entry(operation=Op.WRITE),
    ]
    assert bindings_to_add(
        grant(topic=None, group="app-", prefixed=True, allow=False, deny=True, host="10.0.0.1")
    ) == [
        entry(
            "app-",
            kind=Kind.GROUP,
            pattern=Pattern.PREFIXED,
            host="10.0.0.1",
            permission=Permission.DENY,
        )
    ]
    assert bindings_to_add(
        grant(topic=None, cluster=True, literal=True, operations=("ALTER", "ALL"))
    ) == [entry("kafka-cluster", op, kind=Kind.CLUSTER) for op in (Op.ALTER, Op.ALL)]
    assert bindings_to_add(grant(topic=None, transactional_id="tx", operations=("write",))) == [
        entry("tx", Op.WRITE, kind=Kind.TRANSACTIONAL_ID)
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": None}, "name the resource: --topic, --group, --transactional-id or --cluster"),
        ({"group": "g"}, "choose one of --topic, --group, --transactional-id and --cluster"),
        ({"cluster": True}, "choose one of --topic, --group, --transactional-id and --cluster"),
        ({"topic": " "}, "--topic must not be empty"),
        ({"topic": None, "transactional_id": ""}, "--transactional-id must not be empty"),
        ({"allow": False}, "choose --allow or --deny"),
        ({"deny": True}, "choose one of --allow and --deny"),
        ({"literal": True, "prefixed": True}, "choose one of --literal and --prefixed"),
        (
            {"topic": None, "cluster": True, "prefixed": True},
            "--prefixed does not apply to --cluster (its name is kafka-cluster)",
        ),
        ({"principal": None}, "--principal is required (TYPE:NAME, such as User:alice)"),
        ({"principal": "alice"}, "--principal 'alice': expected TYPE:NAME, such as User:alice"),
        ({"operations": ()}, f"--operation is required (one of {OPERATION_CHOICES})"),
        ({"host": ""}, "--host must not be empty (* is every host)"),
        (
            {"topic": None, "cluster": True},
            "--operation READ does not apply to a cluster resource: choose among ALL, CREATE, "
            "ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE",
        ),
        (
            {"operations": ("IDEMPOTENT_WRITE",)},
            "--operation IDEMPOTENT_WRITE does not apply to a topic resource: choose among "
            "ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS",
        ),
    ],
)
def test_add_refuses_what_kafka_acls_refuses(options: dict[str, Any], message: str) -> None:
    with pytest.raises(CommandError) as info:
        bindings_to_add(grant(**options))
    assert (info.value.exit_code, info.value.message) == (ExitCode.USAGE, message)


def test_a_filter_matches_any_value_of_what_is_not_given() -> None:
    [everything] = acl_filters(AclOptions())
    assert everything == AclFilter() and everything.matches_everything
    assert acl_filters(AclOptions(topic="orders", operations=("read", "write"))) == [
        AclFilter(Kind.TOPIC, "orders", operation=Op.READ),
        AclFilter(Kind.TOPIC, "orders", operation=Op.WRITE),
    ]
    [narrow] = acl_filters(
        AclOptions(group="app-", prefixed=True, principal="User:bob", host="::1", deny=True)
    )
    assert narrow == AclFilter(
        Kind.GROUP, "app-", Pattern.PREFIXED, "User:bob", "::1", None, Permission.DENY
    )
    [cluster] = acl_filters(AclOptions(cluster=True, literal=True))
    assert cluster == AclFilter(Kind.CLUSTER, "kafka-cluster", Pattern.LITERAL)
    [prefixed] = acl_filters(AclOptions(prefixed=True))
    assert prefixed == AclFilter(pattern_type=Pattern.PREFIXED)


def test_remove_needs_at_least_one_option_that_narrows() -> None:
    with pytest.raises(CommandError) as info:
        removal_filters(AclOptions())
    assert info.value.exit_code is ExitCode.USAGE
    assert info.value.message.startswith("name what to remove: a resource (--topic")
    assert removal_filters(AclOptions(allow=True)) == [AclFilter(permission=Permission.ALLOW)]
    with pytest.raises(CommandError):
        removal_filters(AclOptions(principal="nobody"))


def test_options_come_from_the_commands_parameters() -> None:
    params = {"topic": "t", "operations": ["read"], "bootstrap": "b:1", "allow": True}
    assert AclOptions.from_params(params) == AclOptions(topic="t", operations=("read",), allow=True)
    assert AclOptions.from_params({"operations": None}) == AclOptions()


# --- what is shown ----------------------------------------------------------------------


def test_rows_are_sorted_and_each_binding_is_shown_once() -> None:
    found = [
        entry("orders", Op.WRITE),
        entry("app-", Op.READ, kind=Kind.GROUP, pattern=Pattern.PREFIXED),
        entry("orders", Op.READ),
        entry("orders", Op.READ),
        entry("kafka-cluster", Op.ALTER, kind=Kind.CLUSTER, principal="User:ops", host="::1"),
    ]
    assert acl_rows(found) == [
        ("CLUSTER", "LITERAL", "kafka-cluster", "User:ops", "::1", "ALTER", "ALLOW"),
        ("GROUP", "PREFIXED", "app-", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "LITERAL", "orders", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "LITERAL", "orders", "User:alice", "*", "WRITE", "ALLOW"),
    ]


def test_result_lines_say_what_each_binding_means() -> None:
    assert add_line(entry()) == "added ACL: ALLOW User:alice READ on topic 'orders' from any host"
    denied = entry(
        "tx-",
        Op.WRITE,
        kind=Kind.TRANSACTIONAL_ID,
        pattern=Pattern.PREFIXED,
        principal="User:*",
        host="10.0.0.0/8",
        permission=Permission.DENY,
    )
    assert remove_line(denied) == (
        "removed ACL: DENY User:* WRITE on transactional ids prefixed 'tx-' from host 10.0.0.0/8"
    )
    cluster = entry("kafka-cluster", Op.CLUSTER_ACTION, kind=Kind.CLUSTER, principal="User:node")
    assert acl_text(cluster) == "ALLOW User:node CLUSTER_ACTION on the cluster from any host"
    assert acl_text(entry("*", kind=Kind.GROUP)) == (
        "ALLOW User:alice READ on group '*' from any host"
    )


def test_remove_shows_what_matches_before_it_asks() -> None:
    assert confirm_prompt([entry()]) == (
        ["1 ACL matches:", "  ALLOW User:alice READ on topic 'orders' from any host"],
        "Remove it?",
    )
    lines, question = confirm_prompt([entry(), entry(operation=Op.WRITE)])
    assert (lines[0], len(lines), question) == ("2 ACLs match:", 3, "Remove them?")


# --- errors --------------------------------------------------------------------------


def test_a_broker_without_an_authorizer_is_said_so() -> None:
    error = KafkaError(SECURITY_DISABLED, "No Authorizer is configured.")
    for command in AclCommand:
        assert acl_error(connection(), error, command).message == NO_AUTHORIZER_MESSAGE
    assert NO_AUTHORIZER_MESSAGE == (
        "the broker has no authorizer: set authorizer.class.name (docs/security.md)"
    )


def test_a_refusal_says_which_permission_on_the_cluster_is_missing() -> None:
    refused = KafkaError(CLUSTER_AUTHORIZATION_FAILED, "Request ... of User:bob is not authorized.")
    messages = {c: acl_error(connection(), refused, c).message for c in AclCommand}
    assert messages[AclCommand.LIST] == (
        "not authorized to list ACLs: that needs DESCRIBE (or ALTER) on the cluster "
        "(CLUSTER_AUTHORIZATION_FAILED: Request ... of User:bob is not authorized.)"
    )
    assert messages[AclCommand.ADD].startswith(
        "not authorized to add ACLs: that needs ALTER on the cluster ("
    )
    assert messages[AclCommand.REMOVE].startswith("not authorized to remove ACLs: that needs ALTER")


def test_other_errors_are_the_brokers_with_their_context() -> None:
    invalid = KafkaError(INVALID_REQUEST, "Invalid empty host")
    error = acl_error(connection(), invalid, AclCommand.ADD, acl_text(entry()))
    assert error.exit_code is ExitCode.KAFKA_ERROR
    assert error.message == (
        "ALLOW User:alice READ on topic 'orders' from any host: INVALID_REQUEST: Invalid empty host"
    )
    settings = connection()
    settings.errors(KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/bootstrap: Connect failed"))
    unreachable = acl_error(settings, KafkaError(KafkaError._TRANSPORT), AclCommand.LIST)
    assert unreachable.exit_code is ExitCode.UNREACHABLE


def test_a_refusal_of_every_binding_is_said_once() -> None:
    one, other = CommandError("no authorizer"), CommandError("x: INVALID_REQUEST")
    assert unique_failures([one, CommandError("no authorizer"), other, one]) == [one, other]


# --- DescribeAcls, through strom's own client ------------------------------------------


def test_describe_request_fields() -> None:
    assert describe_request(AclFilter()) == {
        "resource_type_filter": Kind.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": Pattern.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": Op.ANY,
        "permission_type": Permission.ANY,
    }
    fields = describe_request(AclFilter(Kind.TOPIC, "t", Pattern.LITERAL, "User:a", "*", Op.READ))
    assert [int(fields[k]) for k in ("resource_type_filter", "pattern_type_filter")] == [2, 3]
    assert (fields["operation"], fields["permission_type"]) == (Op.READ, Permission.ANY)


def _response(error_code: int = 0, message: str | None = None, resources: Any = ()) -> Any:
    """A DescribeAcls response as kio decodes it: its error code is kio's ErrorCode."""
    code = ErrorCode(error_code)
    return SimpleNamespace(error_code=code, error_message=message, resources=resources)


def test_described_bindings_become_entries_unknown_codes_included() -> None:
    acl = SimpleNamespace(principal="User:alice", host="*", operation=3, permission_type=3)
    token = SimpleNamespace(principal="User:bob", host="*", operation=13, permission_type=3)
    response = _response(
        resources=[
            SimpleNamespace(resource_type=2, resource_name="orders", pattern_type=3, acls=[acl]),
            SimpleNamespace(resource_type=7, resource_name="bob", pattern_type=3, acls=[token]),
            SimpleNamespace(resource_type=9, resource_name="x", pattern_type=3, acls=[acl]),
        ]
    )
    found = described_entries(response)
    assert found[0] == entry()
    assert found[1].row() == ("USER", "LITERAL", "bob", "User:bob", "*", "CREATE_TOKENS", "ALLOW")
    assert found[2].resource_type is Kind.UNKNOWN
    assert describe_error(response, AclCommand.LIST) is None


def test_describe_errors_are_not_an_empty_list() -> None:
    disabled = describe_error(_response(SECURITY_DISABLED, "No Authorizer"), AclCommand.LIST)
    assert disabled is not None and disabled.message == NO_AUTHORIZER_MESSAGE
    refused = describe_error(_response(CLUSTER_AUTHORIZATION_FAILED), AclCommand.LIST)
    assert refused is not None and refused.message == (
        "not authorized to list ACLs: that needs DESCRIBE (or ALTER) on the cluster "
        "(CLUSTER_AUTHORIZATION_FAILED)"
    )
    invalid = describe_error(_response(INVALID_REQUEST, "Unknown patternFilter."), AclCommand.LIST)
    assert invalid is not None
    assert invalid.message == "DescribeAcls: INVALID_REQUEST: Unknown patternFilter."


# --- confluent-kafka's bindings ----------------------------------------------------------


def test_bindings_go_to_confluent_kafka_and_back() -> None:
    for made in (
        entry(),
        entry("kafka-cluster", Op.IDEMPOTENT_WRITE, kind=Kind.CLUSTER),
        entry("tx-", Op.WRITE, kind=Kind.TRANSACTIONAL_ID, pattern=Pattern.PREFIXED),
        entry("g", Op.ALL, kind=Kind.GROUP, host="::1", permission=Permission.DENY),
    ):
        binding = acl_cli._admin_binding(made)
        assert entry_from(binding) == made
    assert acl_cli._admin_binding(entry(kind=Kind.CLUSTER)).restype is ResourceType.BROKER


def test_filters_go_to_confluent_kafka_with_any_for_what_is_not_given() -> None:
    everything = acl_cli._admin_filter(AclFilter())
    assert (everything.restype, everything.name, everything.principal) == (
        ResourceType.ANY,
        None,
        None,
    )
    assert everything.resource_pattern_type is ResourcePatternType.ANY
    assert everything.operation is ConfluentOperation.ANY
    narrow = acl_cli._admin_filter(AclFilter(Kind.GROUP, "g", Pattern.PREFIXED, "User:a"))
    assert (narrow.restype, narrow.name, narrow.principal) == (ResourceType.GROUP, "g", "User:a")
    assert narrow.resource_pattern_type is ResourcePatternType.PREFIXED


# --- the commands, stopped before they connect --------------------------------------------


class Stopped:
    """Replaces the broker calls: describe answers `matching`; connecting stops with exit
    code 3, unless `deleted` is given, which the deletion then answers."""

    def __init__(self, matching: list[AclEntry], deleted: list[AclEntry] | None) -> None:
        self.matching, self.deleted = matching, deleted
        self.calls: list[str] = []

    def describe(self, *args: Any) -> list[AclEntry]:
        self.calls.append("describe")
        return self.matching

    def connect(self, bootstrap: str, timeout: float, command_config: Path | None) -> Any:
        self.calls.append("connect")
        if self.deleted is None:
            raise CommandError("stopped before connecting", ExitCode.UNREACHABLE)
        return connection(), None

    def delete(self, *args: Any) -> tuple[list[AclEntry], list[CommandError]]:
        self.calls.append("delete")
        return self.deleted or [], []


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> Stopped:
    fake = Stopped([entry()], None)
    monkeypatch.setattr(acl_cli, "describe", fake.describe)
    monkeypatch.setattr(acl_cli, "_connect", fake.connect)
    monkeypatch.setattr(acl_cli, "delete", fake.delete)
    monkeypatch.setattr(acl_cli, "stdin_is_tty", lambda: False)
    return fake


ALICE = ["--principal", "User:alice"]


USAGE_ERRORS = [
    (
        ["add", "--allow", *ALICE, "-o", "fly", "-t", "t"],
        f"--operation 'fly': expected one of {OPERATION_CHOICES}",
    ),
    (
        ["add", "--allow", *ALICE, "-t", "t"],
        f"--operation is required (one of {OPERATION_CHOICES})",
    ),
    (["add", *ALICE, "-o", "read", "-t", "t"], "choose --allow or --deny"),
    (
        ["add", "--allow", "--principal", "alice", "-o", "read", "-t", "t"],
        "--principal 'alice': expected TYPE:NAME, such as User:alice",
    ),
    (
        ["list", "--topic", "t", "--group", "g"],
        "choose one of --topic, --group, --transactional-id and --cluster",
    ),
    (["list", "--allow", "--deny"], "choose one of --allow and --deny"),
    (["list", "--host", ""], "--host must not be empty (* is every host)"),
    (
        ["remove", "--yes"],
        "name what to remove: a resource (--topic, --group, --transactional-id, --cluster), "
        "--principal, --host, --operation, --allow or --deny",
    ),
    (
        ["remove", "-t", "t"],
        "no terminal to ask on before removing ACLs: add --yes to remove them without asking",
    ),
]


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS)
def test_usage_errors_exit_2_before_connecting(
    stopped: Stopped, args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["acl", *args])
    assert result.exit_code == 2
    assert result.stderr == f"strom: {message}\n"
    assert stopped.calls == []


def test_add_connects_once_its_options_are_good(stopped: Stopped) -> None:
    result = runner.invoke(app, ["acl", "add", "--deny", *ALICE, "-o", "all", "--cluster"])
    assert (result.exit_code, result.stderr) == (3, "strom: stopped before connecting\n")
    assert stopped.calls == ["connect"]


@pytest.mark.parametrize(("answer", "removed"), [("y\n", True), ("n\n", False), ("", False)])
def test_remove_asks_on_a_terminal(
    stopped: Stopped, monkeypatch: pytest.MonkeyPatch, answer: str, removed: bool
) -> None:
    monkeypatch.setattr(acl_cli, "stdin_is_tty", lambda: True)
    stopped.deleted = [entry()]
    result = runner.invoke(app, ["acl", "remove", "-t", "orders"], input=answer)
    assert result.exit_code == 0
    assert result.stderr.startswith(
        "1 ACL matches:\n  ALLOW User:alice READ on topic 'orders' from any host\nRemove it? [y/N]"
    )
    removed_line = "removed ACL: ALLOW User:alice READ on topic 'orders' from any host"
    if removed:
        assert stopped.calls == ["describe", "connect", "delete"]
        assert result.stdout.splitlines()[-1] == removed_line  # after the echoed answer
    else:
        assert stopped.calls == ["describe"]
        assert "removed" not in result.stdout
        assert result.stderr.endswith("nothing removed\n")


def test_remove_with_yes_does_not_ask(stopped: Stopped) -> None:
    stopped.deleted = []
    result = runner.invoke(app, ["acl", "remove", "--principal", "User:bob", "--yes"])
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "no ACLs match: nothing removed\n"
    assert stopped.calls == ["connect", "delete"]


def test_remove_asks_nothing_when_nothing_matches(
    stopped: Stopped, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acl_cli, "stdin_is_tty", lambda: True)
    stopped.matching = []
    result = runner.invoke(app, ["acl", "remove", "--deny"])
    assert (result.exit_code, result.stderr) == (0, "no ACLs match: nothing removed\n")
    assert stopped.calls == ["describe"]


def test_list_prints_a_table_or_says_there_is_nothing(stopped: Stopped) -> None:
    stopped.matching = [entry(operation=Op.WRITE), entry()]
    result = runner.invoke(app, ["acl", "list"])
    assert result.exit_code == 0
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "RESOURCE", "TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION",
    ]  # fmt: skip
    assert [row.split()[-2] for row in rows] == ["READ", "WRITE"]
    stopped.matching = []
    assert runner.invoke(app, ["acl", "list"]).stderr == "no ACLs\n"
    assert runner.invoke(app, ["acl", "list", "-t", "t"]).stderr == "no ACLs match\n"


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["acl", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for command in ("list", "add", "remove"):
        assert command in result.output
    assert "acl" in runner.invoke(app, ["--help"]).output
