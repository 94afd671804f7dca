"""Consumer groups and security for the console, asked of the cluster: the same admin
requests `strom group` makes (ListGroups, DescribeGroups, OffsetFetch, ListOffsets,
OffsetCommit), and DescribeAcls and DescribeUserScramCredentials."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.cli.common import (
    CommandError,
    ConnectionSettings,
    admin_outcome,
    kafka_error_message,
)
from strom.cli.group_admin import (
    commit_plan,
    committed_offsets,
    describe_groups,
    group_exists,
    list_offsets,
    offset_spec,
    partition_bounds,
)
from strom.cli.group_model import (
    Partition,
    PartitionProgress,
    PlannedOffset,
    ResetMode,
    ResetTarget,
    active_members_message,
    group_missing_message,
    group_progress,
    partition_owners,
    plan_reset,
    state_name,
    total_lag,
)
from strom.console.backend import ClusterBackend

if TYPE_CHECKING:
    from confluent_kafka.admin import ConsumerGroupDescription  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    kind: str
    """The group's protocol (classic, consumer, share), or "simple" for one that only
    commits offsets."""
    members: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class GroupDetail:
    description: ConsumerGroupDescription
    progress: tuple[PartitionProgress, ...]

    @property
    def lag(self) -> int | None:
        return total_lag(self.progress)


def _kind(listing: Any) -> str:
    kind = getattr(listing, "type", None)
    name = str(getattr(kind, "name", kind or "")).lower()
    if name in ("", "unknown"):
        return "simple" if listing.is_simple_consumer_group else "classic"
    return name


def list_groups(backend: ClusterBackend) -> tuple[list[GroupSummary], list[str]]:
    """Every group, with its member count and total lag, and warnings about brokers that
    could not list theirs."""
    admin, connection = backend.admin, backend.connection
    future = admin.list_consumer_groups(request_timeout=backend.timeout_s)
    listing, error = admin_outcome(future, connection, "listing groups")
    if error is not None:
        raise connection.kafka_error(error)
    warnings = [f"a broker did not list its groups: {e}" for e in listing.errors or []]
    groups = sorted(listing.valid or [], key=lambda g: g.group_id)
    if not groups:
        return [], warnings
    futures = admin.describe_consumer_groups(
        [g.group_id for g in groups], request_timeout=backend.timeout_s
    )
    summaries = []
    for group in groups:
        description, error = admin_outcome(futures[group.group_id], connection, group.group_id)
        members = None if error is not None else len(description.members)
        lag = None
        try:
            lag = group_detail(backend, group.group_id, description).lag if error is None else None
        except CommandError as exc:
            warnings.append(f"group {group.group_id!r}: {exc.message}")
        summaries.append(
            GroupSummary(
                group.group_id,
                state_name(getattr(group, "state", "UNKNOWN")),
                _kind(group),
                members,
                lag,
            )
        )
    return summaries, warnings


def group_detail(
    backend: ClusterBackend, group: str, description: ConsumerGroupDescription | None = None
) -> GroupDetail:
    admin, connection = backend.admin, backend.connection
    if description is None:
        description = describe_groups(admin, connection, [group])[group]
        if not group_exists(description):
            raise CommandError(group_missing_message(group))
    committed = committed_offsets(admin, connection, group)
    owners = partition_owners(description.members)
    partitions = set(committed) | set(owners)
    log_ends, _ = list_offsets(admin, connection, partitions, offset_spec("latest"))
    return GroupDetail(description, tuple(group_progress(committed, log_ends, owners)))


def reset_offsets(
    backend: ClusterBackend, group: str, topic: str | None, target: ResetTarget
) -> tuple[list[PlannedOffset], list[str]]:
    """Commit new offsets for a group without members: for one topic's partitions, or for
    every partition the group has an offset for. (plan, warnings) as `strom group`."""
    admin, connection = backend.admin, backend.connection
    description = describe_groups(admin, connection, [group])[group]
    if description.members:
        raise CommandError(active_members_message(group))
    committed = committed_offsets(admin, connection, group)
    if topic:
        described = connection.topic(backend.metadata(), topic)
        partitions: list[Partition] = [(topic, p) for p in sorted(described.partitions)]
    else:
        partitions = sorted(committed)
        if not partitions:
            raise CommandError(f"group {group!r} has no committed offsets; choose a topic")
    at_ms = target.value if target.mode is ResetMode.DATETIME else None
    bounds = partition_bounds(admin, connection, partitions, at_ms)
    plan, warnings = plan_reset(target, partitions, committed, bounds)
    commit_plan(admin, connection, group, plan)
    return plan, warnings


@dataclass(frozen=True, slots=True)
class SecurityView:
    acls: list[tuple[str, ...]] | None
    acl_problem: str | None
    users: list[tuple[str, str]] | None
    user_problem: str | None


def acl_listing(connection: ConnectionSettings) -> tuple[list[tuple[str, ...]] | None, str | None]:
    """Every ACL binding as a row, or why they cannot be listed. Asked through strom's
    own client, as `strom acl list` asks: librdkafka answers a refused DescribeAcls
    (SECURITY_DISABLED on a cluster without an authorizer, CLUSTER_AUTHORIZATION_FAILED)
    with an empty list, which would read as "no ACLs"."""
    from strom.cli.acl import describe
    from strom.cli.acl_model import AclCommand, AclFilter

    try:
        entries = describe(
            connection.bootstrap,
            connection.timeout_s,
            connection.command_config_file,
            [AclFilter()],
            AclCommand.LIST,
        )
    except CommandError as exc:
        return None, str(exc)
    return [entry.row() for entry in entries], None


def security(backend: ClusterBackend) -> SecurityView:
    """The cluster's ACLs and SCRAM users, or why they cannot be shown."""
    connection = backend.connection
    acls, acl_problem = acl_listing(connection)
    users: list[tuple[str, str]] | None = None
    user_problem = None
    try:
        described = backend.admin.describe_user_scram_credentials(request_timeout=backend.timeout_s)
        assert isinstance(described, concurrent.futures.Future)  # one future: no users named
        found, error = admin_outcome(described, connection, "SCRAM users")
        if error is not None:
            user_problem = kafka_error_message(error.name(), error.str())
        else:
            users = [
                (
                    name,
                    ", ".join(
                        f"{c.mechanism.name} ({c.iterations} iterations)"
                        for c in description.scram_credential_infos
                    ),
                )
                for name, description in sorted(found.items())
            ]
    except CommandError as exc:
        user_problem = exc.message
    return SecurityView(acls, acl_problem, users, user_problem)
