"""What `strom acl` works out without a broker: its options as ACL bindings and filters,
DescribeAcls' request fields and bindings, table rows, result lines and the errors a user
should see.

Kafka's codes of resource types, pattern types, operations and permissions, and the
operations each resource type takes, come from strom.security.operations, which imports
only the standard library, so `strom` still starts without the broker's modules.
Everything here is a function of plain values, tested without sockets; acl.py
does the talking.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from strom.cli.common import CommandError, ConnectionSettings, kafka_error_message, usage_error
from strom.cli.wire import error_name, is_error
from strom.security.operations import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    from_code,
)

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

CLUSTER_RESOURCE_NAME = "kafka-cluster"
"""The cluster's only resource name in Kafka's ACLs."""
ANY_HOST = "*"
LIST_HEADERS = ("RESOURCE TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
NO_AUTHORIZER_MESSAGE = "the broker has no authorizer: set authorizer.class.name (docs/security.md)"
NOTHING_MATCHES = "no ACLs match: nothing removed"


_Op = AclOperation
OPERATIONS = tuple(op for op in AclOperation if _Op.ALL <= op <= _Op.IDEMPOTENT_WRITE)
"""The operations a binding made here may name (librdkafka has no token operations)."""


def resource_option(kind: AclResourceType) -> str:
    """The option that names a resource of this type: --topic, --transactional-id."""
    return "--" + kind.name.lower().replace("_", "-")


def resource_noun(kind: AclResourceType) -> str:
    return kind.name.lower().replace("_", " ")


class AclCommand(StrEnum):
    """What a command does with ACLs, and what it needs on the cluster to do it."""

    LIST = "list"
    ADD = "add"
    REMOVE = "remove"

    @property
    def needs(self) -> str:
        return "DESCRIBE (or ALTER)" if self is AclCommand.LIST else "ALTER"


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL binding: who may (or may not) do what, on which resources, from where."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def row(self) -> tuple[str, str, str, str, str, str, str]:
        return (
            self.resource_type.name,
            self.pattern_type.name,
            self.resource_name,
            self.principal,
            self.host,
            self.operation.name,
            self.permission.name,
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings `list` and `remove` take: None matches any value."""

    resource_type: AclResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    principal: str | None = None
    host: str | None = None
    operation: AclOperation | None = None
    permission: AclPermissionType | None = None

    @property
    def matches_everything(self) -> bool:
        return all(value is None for value in astuple(self))


@dataclass(frozen=True, slots=True)
class AclOptions:
    """The options `add`, `list` and `remove` share, as typed."""

    topic: str | None = None
    group: str | None = None
    transactional_id: str | None = None
    cluster: bool = False
    literal: bool = False
    prefixed: bool = False
    principal: str | None = None
    host: str | None = None
    operations: tuple[str, ...] = ()
    allow: bool = False
    deny: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> AclOptions:
        """From a command's parameters by name (typer's `ctx.params`)."""
        values = {f.name: params[f.name] for f in fields(cls) if f.name in params}
        values["operations"] = tuple(values.get("operations") or ())
        return cls(**values)


def _squashed(text: str) -> str:
    return re.sub(r"[\s_-]", "", text).upper()


_OPERATIONS_BY_SQUASHED = {_squashed(op.name): op for op in OPERATIONS}
OPERATION_CHOICES = ", ".join(op.name for op in OPERATIONS)


def parse_operation(text: str) -> AclOperation:
    """An operation in any case, with or without its underscore: `read`, `ClusterAction`
    and `describe-configs` are Kafka's READ, CLUSTER_ACTION and DESCRIBE_CONFIGS."""
    operation = _OPERATIONS_BY_SQUASHED.get(_squashed(text))
    if operation is None or not text.strip():
        raise usage_error(f"--operation {text!r}: expected one of {OPERATION_CHOICES}")
    return operation


def parse_operations(texts: Iterable[str]) -> list[AclOperation]:
    """Each --operation (a comma-separated list is fine), each once, in order."""
    names = [part for text in texts for part in text.split(",")]
    return list(dict.fromkeys(parse_operation(name) for name in names))


def check_principal(text: str) -> str:
    """`Type:name`, as Kafka's principals are written (`User:alice`, `User:*`)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind.strip() or not name.strip():
        raise usage_error(f"--principal {text!r}: expected TYPE:NAME, such as User:alice")
    return text


def check_host(text: str) -> str:
    if not text.strip():
        raise usage_error("--host must not be empty (* is every host)")
    return text


def chosen_resource(options: AclOptions) -> tuple[AclResourceType, str] | None:
    """The resource type and name an option names; at most one may be given."""
    named = [
        (kind, name)
        for kind, name in (
            (AclResourceType.TOPIC, options.topic),
            (AclResourceType.GROUP, options.group),
            (AclResourceType.TRANSACTIONAL_ID, options.transactional_id),
        )
        if name is not None
    ]
    if options.cluster:
        named.append((AclResourceType.CLUSTER, CLUSTER_RESOURCE_NAME))
    if len(named) > 1:
        raise usage_error("choose one of --topic, --group, --transactional-id and --cluster")
    if not named:
        return None
    kind, name = named[0]
    if not name.strip():
        raise usage_error(f"{resource_option(kind)} must not be empty")
    return kind, name


def chosen_pattern(options: AclOptions, kind: AclResourceType | None) -> PatternType | None:
    if options.literal and options.prefixed:
        raise usage_error("choose one of --literal and --prefixed")
    if options.prefixed and kind is AclResourceType.CLUSTER:
        raise usage_error(
            f"--prefixed does not apply to --cluster (its name is {CLUSTER_RESOURCE_NAME})"
        )
    if options.prefixed:
        return PatternType.PREFIXED
    return PatternType.LITERAL if options.literal else None


def chosen_permission(options: AclOptions) -> AclPermissionType | None:
    if options.allow and options.deny:
        raise usage_error("choose one of --allow and --deny")
    if options.allow:
        return AclPermissionType.ALLOW
    return AclPermissionType.DENY if options.deny else None


def bindings_to_add(options: AclOptions) -> list[AclEntry]:
    """The bindings `add` creates: one per operation. A resource, --allow or --deny,
    --principal and an --operation the resource type has a use for are required."""
    resource = chosen_resource(options)
    if resource is None:
        raise usage_error("name the resource: --topic, --group, --transactional-id or --cluster")
    kind, name = resource
    pattern = chosen_pattern(options, kind) or PatternType.LITERAL
    permission = chosen_permission(options)
    if permission is None:
        raise usage_error("choose --allow or --deny")
    if options.principal is None:
        raise usage_error("--principal is required (TYPE:NAME, such as User:alice)")
    principal = check_principal(options.principal)
    operations = parse_operations(options.operations)
    if not operations:
        raise usage_error(f"--operation is required (one of {OPERATION_CHOICES})")
    host = check_host(ANY_HOST if options.host is None else options.host)
    supported = SUPPORTED_OPERATIONS[kind] | {AclOperation.ALL}
    for operation in operations:
        if operation not in supported:
            choices = ", ".join(op.name for op in OPERATIONS if op in supported)
            raise usage_error(
                f"--operation {operation.name} does not apply to a {resource_noun(kind)} resource: "
                f"choose among {choices}"
            )
    return [AclEntry(kind, name, pattern, principal, host, op, permission) for op in operations]


def acl_filters(options: AclOptions) -> list[AclFilter]:
    """The filters `list` and `remove` use: one per --operation (one for any without)."""
    resource = chosen_resource(options)
    kind, name = resource if resource is not None else (None, None)
    pattern = chosen_pattern(options, kind)
    permission = chosen_permission(options)
    principal = None if options.principal is None else check_principal(options.principal)
    host = None if options.host is None else check_host(options.host)
    operations: list[AclOperation | None] = [*parse_operations(options.operations)]
    return [
        AclFilter(kind, name, pattern, principal, host, operation, permission)
        for operation in operations or [None]
    ]


def removal_filters(options: AclOptions) -> list[AclFilter]:
    """`remove`'s filters: at least one option must narrow them."""
    filters = acl_filters(options)
    if any(f.matches_everything for f in filters):
        raise usage_error(
            "name what to remove: a resource (--topic, --group, --transactional-id, "
            "--cluster), --principal, --host, --operation, --allow or --deny"
        )
    return filters


def sorted_entries(entries: Iterable[AclEntry]) -> list[AclEntry]:
    """Each binding once, by resource type, name, pattern, principal, host, operation
    and permission."""
    return sorted(set(entries), key=AclEntry.row)


def acl_rows(entries: Iterable[AclEntry]) -> list[tuple[str, ...]]:
    return [entry.row() for entry in sorted_entries(entries)]


def resource_text(kind: AclResourceType, name: str, pattern: PatternType) -> str:
    """Such as "topic 'orders'", "groups prefixed 'app-'" or "the cluster"."""
    if kind is AclResourceType.CLUSTER:
        return "the cluster"
    if pattern is PatternType.PREFIXED:
        return f"{resource_noun(kind)}s prefixed {name!r}"
    return f"{resource_noun(kind)} {name!r}"


def acl_text(entry: AclEntry) -> str:
    """Such as "ALLOW User:alice READ on topic 'orders' from any host"."""
    resource = resource_text(entry.resource_type, entry.resource_name, entry.pattern_type)
    host = "any host" if entry.host == ANY_HOST else f"host {entry.host}"
    return (
        f"{entry.permission.name} {entry.principal} {entry.operation.name} on {resource} "
        f"from {host}"
    )


def add_line(entry: AclEntry) -> str:
    return f"added ACL: {acl_text(entry)}"


def remove_line(entry: AclEntry) -> str:
    return f"removed ACL: {acl_text(entry)}"


def count_text(count: int) -> str:
    return f"{count} ACL" if count == 1 else f"{count} ACLs"


def confirm_prompt(matching: Sequence[AclEntry]) -> tuple[list[str], str]:
    """What `remove` shows before it asks (how many bindings match, then each), and the
    question."""
    one = len(matching) == 1
    heading = f"{count_text(len(matching))} {'matches' if one else 'match'}:"
    lines = [heading, *(f"  {acl_text(entry)}" for entry in matching)]
    return lines, f"Remove {'it' if one else 'them'}?"


def unique_failures(failures: list[CommandError]) -> list[CommandError]:
    """Each message once: a refusal of the whole request comes back for every binding."""
    first: dict[str, CommandError] = {}
    for failure in failures:
        first.setdefault(failure.message, failure)
    return list(first.values())


def refusal_error(name: str, text: str | None, command: AclCommand) -> CommandError | None:
    """What a user should see for a broker without an authorizer, or for a principal
    without the permission the command needs on the cluster; None for other errors."""
    if name == "SECURITY_DISABLED":
        return CommandError(NO_AUTHORIZER_MESSAGE)
    if name == "CLUSTER_AUTHORIZATION_FAILED":
        detail = kafka_error_message(name, text) if text else name
        return CommandError(
            f"not authorized to {command} ACLs: that needs {command.needs} on the cluster "
            f"({detail})"
        )
    return None


def acl_error(
    connection: ConnectionSettings,
    error: KafkaError,
    command: AclCommand,
    context: str | None = None,
) -> CommandError:
    """A refusal as refusal_error says it; an unreachable broker is exit code 3; any other
    error is the broker's error name and message after `context`."""
    refused = refusal_error(error.name(), error.str(), command)
    return refused or connection.kafka_error(error, context)


def describe_error(response: Any, command: AclCommand) -> CommandError | None:
    """The error of a DescribeAcls response, if it has one (librdkafka drops it, which is
    why `strom acl` describes through strom's own client)."""
    if not is_error(response.error_code):
        return None
    name, text = error_name(response.error_code), response.error_message
    refused = refusal_error(name, text, command)
    if refused is not None:
        return refused
    return CommandError(kafka_error_message(name, text or "", "DescribeAcls"))


def entry_from(binding: Any) -> AclEntry:
    """confluent-kafka's AclBinding as plain data (its enums' values are Kafka's codes)."""
    return AclEntry(
        from_code(AclResourceType, binding.restype.value),
        binding.name,
        from_code(PatternType, binding.resource_pattern_type.value),
        binding.principal,
        binding.host,
        from_code(AclOperation, binding.operation.value),
        from_code(AclPermissionType, binding.permission_type.value),
    )


def describe_request(acl_filter: AclFilter) -> dict[str, Any]:
    """DescribeAcls' fields (v1 on) for a filter: ANY, or None for a string, matches any."""
    f = acl_filter
    return {
        "resource_type_filter": AclResourceType.ANY if f.resource_type is None else f.resource_type,
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": PatternType.ANY if f.pattern_type is None else f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": AclOperation.ANY if f.operation is None else f.operation,
        "permission_type": AclPermissionType.ANY if f.permission is None else f.permission,
    }


def described_entries(response: Any) -> list[AclEntry]:
    """The bindings of a DescribeAcls response (kio's, or any object with its fields)."""
    return [
        AclEntry(
            from_code(AclResourceType, resource.resource_type),
            resource.resource_name,
            from_code(PatternType, resource.pattern_type),
            acl.principal,
            acl.host,
            from_code(AclOperation, acl.operation),
            from_code(AclPermissionType, acl.permission_type),
        )
        for resource in response.resources
        for acl in resource.acls
    ]
