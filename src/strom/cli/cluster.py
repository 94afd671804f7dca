"""`strom cluster status`: the cluster's id and name, the controller quorum and the brokers;
`strom cluster log-dirs` and `strom cluster unregister`.

DescribeCluster v2 (with fenced brokers) and DescribeQuorum go through strom's own client
(see wire.py): confluent-kafka asks for neither. The cluster name is strom's `cluster.name`,
read with DescribeConfigs on the BROKER resource of the broker answering; a broker that
has no such key (Kafka) shows "-". The same request reads `zookeeper.connect`: a cluster
keeping its metadata in ZooKeeper has no controller quorum to describe, so its ensemble is
shown instead. The tables are built from the responses by pure functions, tested without
a broker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    TimeoutOption,
    echo_error,
    print_table,
    reporting_errors,
)
from strom.cli.wire import (
    WireSession,
    error_name,
    format_address,
    is_error,
    run_session,
)

cluster_app = typer.Typer(
    name="cluster",
    help="Show a cluster's controller quorum (or ZooKeeper ensemble) and brokers.",
    no_args_is_help=True,
)

DESCRIBE_CONFIGS = 32
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
BROKER_RESOURCE = 4
METADATA_TOPIC = "__cluster_metadata"
_BROKERS_ENDPOINT = 1


class MemberRole(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OBSERVER = "observer"


@dataclass(frozen=True, slots=True)
class QuorumMember:
    node_id: int
    role: MemberRole
    address: str | None
    log_end_offset: int | None
    lag: int | None
    """How far the member's log end is behind the leader's high watermark."""
    last_contact_ago_ms: int | None


@dataclass(frozen=True, slots=True)
class Quorum:
    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    members: tuple[QuorumMember, ...]


@dataclass(frozen=True, slots=True)
class BrokerState:
    node_id: int
    address: str
    rack: str | None
    fenced: bool | None
    """None when the broker's DescribeCluster is older than v2 and does not say."""


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str
    cluster_name: str | None
    controller_id: int | None
    brokers: tuple[BrokerState, ...]
    quorum: Quorum | None
    quorum_error: str | None
    """Why the quorum is not shown (DescribeQuorum failed)."""
    zookeeper: str | None = None
    """The broker's zookeeper.connect when the metadata is in ZooKeeper (no quorum then)."""


class QuorumError(Exception):
    """DescribeQuorum answered with an error code."""


def _message(name: str, code: Any, text: str | None) -> str:
    return f"{name}: {error_name(code)}" + (f": {text}" if text else "")


def brokers_from(response: Any, *, fenced_known: bool) -> tuple[BrokerState, ...]:
    """The brokers of a DescribeCluster response, by node id."""
    brokers = [
        BrokerState(
            node_id=int(b.broker_id),
            address=format_address(b.host, int(b.port)),
            rack=b.rack,
            fenced=bool(getattr(b, "is_fenced", False)) if fenced_known else None,
        )
        for b in response.brokers
    ]
    return tuple(sorted(brokers, key=lambda b: b.node_id))


def quorum_from(response: Any, now_ms: int) -> Quorum:
    """The metadata log's quorum from a DescribeQuorum response; QuorumError on an error."""
    if is_error(response.error_code):
        raise QuorumError(_message("DescribeQuorum", response.error_code, response.error_message))
    partitions = [p for t in response.topics for p in t.partitions]
    if not partitions:
        raise QuorumError("DescribeQuorum: the answer has no metadata log partition")
    partition = partitions[0]
    if is_error(partition.error_code):
        raise QuorumError(
            _message(
                "DescribeQuorum",
                partition.error_code,
                getattr(partition, "error_message", None),
            )
        )
    addresses = {
        int(node.node_id): format_address(node.listeners[0].host, int(node.listeners[0].port))
        for node in getattr(response, "nodes", ())
        if node.listeners
    }
    leader_id = int(partition.leader_id)
    high_watermark = int(partition.high_watermark)

    def member(replica: Any, role: MemberRole) -> QuorumMember:
        node_id = int(replica.replica_id)
        if role is MemberRole.FOLLOWER and node_id == leader_id:
            role = MemberRole.LEADER
        log_end = int(replica.log_end_offset)
        contact = int(getattr(replica, "last_fetch_timestamp", -1))
        return QuorumMember(
            node_id=node_id,
            role=role,
            address=addresses.get(node_id),
            log_end_offset=log_end if log_end >= 0 else None,
            lag=max(0, high_watermark - log_end) if log_end >= 0 else None,
            last_contact_ago_ms=max(0, now_ms - contact) if contact >= 0 else None,
        )

    members = [member(r, MemberRole.FOLLOWER) for r in partition.current_voters]
    members += [member(r, MemberRole.OBSERVER) for r in partition.observers]
    return Quorum(
        leader_id=leader_id if leader_id >= 0 else None,
        leader_epoch=int(partition.leader_epoch),
        high_watermark=high_watermark,
        members=tuple(sorted(members, key=lambda m: (m.role is MemberRole.OBSERVER, m.node_id))),
    )


def format_ago(ms: int | None) -> str:
    """312 -> "312 ms ago", 4200 -> "4.2 s ago", 125000 -> "2 min ago"; None -> "-"."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms ago"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s ago"
    if ms < 3_600_000:
        return f"{ms // 60_000} min ago"
    return f"{ms // 3_600_000} h ago"


def _or_dash(value: object | None) -> str:
    return "-" if value is None else str(value)


def summary_lines(status: ClusterStatus) -> list[str]:
    controller = "none" if status.controller_id is None else f"node {status.controller_id}"
    return [
        f"Cluster id:    {status.cluster_id or '-'}",
        f"Cluster name:  {status.cluster_name or '-'}",
        f"Controller:    {controller}",
        *([f"Metadata:      ZooKeeper {status.zookeeper}"] if status.zookeeper else []),
    ]


def quorum_heading(quorum: Quorum) -> str:
    voters = sum(1 for m in quorum.members if m.role is not MemberRole.OBSERVER)
    leader = "no leader" if quorum.leader_id is None else f"leader node {quorum.leader_id}"
    return (
        f"Controller quorum: {voters} voter{'s' if voters != 1 else ''}, {leader}, "
        f"leader epoch {quorum.leader_epoch}, high watermark {quorum.high_watermark}"
    )


QUORUM_HEADERS = ("NODE", "ROLE", "CONTROLLER ADDRESS", "LOG END OFFSET", "LAG", "LAST CONTACT")
BROKER_HEADERS = ("NODE", "ADDRESS", "RACK", "STATE")


def quorum_rows(quorum: Quorum) -> list[tuple[str, ...]]:
    return [
        (
            str(m.node_id),
            m.role.value,
            _or_dash(m.address),
            _or_dash(m.log_end_offset),
            _or_dash(m.lag),
            format_ago(m.last_contact_ago_ms),
        )
        for m in quorum.members
    ]


def broker_state(broker: BrokerState) -> str:
    if broker.fenced is None:
        return "unfenced"  # an older DescribeCluster lists unfenced brokers only
    return "fenced" if broker.fenced else "live"


def broker_rows(brokers: Sequence[BrokerState]) -> list[tuple[str, ...]]:
    return [(str(b.node_id), b.address, b.rack or "-", broker_state(b)) for b in brokers]


def brokers_heading(brokers: Sequence[BrokerState]) -> str:
    fenced = sum(1 for b in brokers if b.fenced)
    return f"Brokers: {len(brokers) - fenced} live, {fenced} fenced"


def print_status(status: ClusterStatus) -> None:
    print("\n".join(summary_lines(status)))
    if status.quorum is not None:
        print(f"\n{quorum_heading(status.quorum)}\n")
        print_table(QUORUM_HEADERS, quorum_rows(status.quorum))
    print(f"\n{brokers_heading(status.brokers)}\n")
    if status.brokers:
        print_table(BROKER_HEADERS, broker_rows(status.brokers))
    else:
        print("(none registered)")


# --- talking to the cluster -----------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


async def describe_cluster(session: WireSession) -> tuple[int, Any]:
    """(version, answer) of DescribeCluster, fenced brokers included from v2."""
    version, cluster = await session.call(
        DESCRIBE_CLUSTER,
        "DescribeCluster",
        {
            "include_cluster_authorized_operations": False,
            "endpoint_type": _BROKERS_ENDPOINT,
            "include_fenced_brokers": True,
        },
        max_version=2,
    )
    if is_error(cluster.error_code):
        raise CommandError(_message("DescribeCluster", cluster.error_code, cluster.error_message))
    return version, cluster


async def fetch_status(session: WireSession) -> ClusterStatus:
    version, cluster = await describe_cluster(session)
    brokers = brokers_from(cluster, fenced_known=version >= 2)
    configs = await fetch_broker_configs(session, brokers)
    zookeeper = configs.get("zookeeper.connect")
    quorum: Quorum | None = None
    quorum_error: str | None = None
    if zookeeper is None:
        try:
            _, answer = await session.call(
                DESCRIBE_QUORUM,
                "DescribeQuorum",
                {
                    "topics": [
                        {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}
                    ]
                },
                max_version=2,
            )
            quorum = quorum_from(answer, _now_ms())
        except QuorumError as exc:
            quorum_error = str(exc)
        except CommandError as exc:
            quorum_error = exc.message
    controller = int(cluster.controller_id)
    return ClusterStatus(
        cluster_id=str(cluster.cluster_id),
        cluster_name=configs.get("cluster.name"),
        controller_id=controller if controller >= 0 else None,
        brokers=brokers,
        quorum=quorum,
        quorum_error=quorum_error,
        zookeeper=zookeeper,
    )


def answering_broker_id(session: WireSession, brokers: Sequence[BrokerState]) -> int | None:
    """The id of the broker the session talks to, if its address is one the cluster lists."""
    if session.address is None:
        return None
    address = format_address(*session.address)
    return next((b.node_id for b in brokers if b.address == address), None)


_BROKER_KEYS = ("cluster.name", "zookeeper.connect")


async def fetch_broker_configs(
    session: WireSession, brokers: Sequence[BrokerState]
) -> dict[str, str]:
    """strom's cluster.name and zookeeper.connect from the answering broker's configs,
    those that are set (none when it cannot say)."""
    node_id = answering_broker_id(session, brokers)
    try:
        _, answer = await session.call(
            DESCRIBE_CONFIGS,
            "DescribeConfigs",
            {
                "resources": [
                    {
                        "resource_type": BROKER_RESOURCE,
                        "resource_name": "" if node_id is None else str(node_id),
                        "configuration_keys": list(_BROKER_KEYS),
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
            max_version=4,
        )
    except CommandError:
        return {}
    found: dict[str, str] = {}
    for result in answer.results:
        if is_error(result.error_code):
            return {}
        for entry in result.configs:
            if entry.name in _BROKER_KEYS and entry.value:
                found[str(entry.name)] = str(entry.value)
    return found


@cluster_app.command("status")
def status(
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show the cluster id and name, the active controller, the controller quorum (each
    voter's log end offset, lag behind the high watermark and last contact) or the
    ZooKeeper ensemble holding the metadata, and the brokers, live or fenced."""
    with reporting_errors():
        found = run_session(bootstrap, timeout, fetch_status, command_config)
        print_status(found)
        if found.quorum_error is not None:
            echo_error(f"cannot show the controller quorum: {found.quorum_error}")
            raise typer.Exit(1)


# --- strom cluster log-dirs ------------------------------------------------------------

DESCRIBE_LOG_DIRS = 35
METADATA = 3
LOG_DIR_HEADERS = ("BROKER", "LOG DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET LAG")


def format_bytes(size: int) -> str:
    """1234567 -> "1.2 MB" (decimal units, as `du -h --si`); -1 (unknown) -> "-"."""
    if size < 0:
        return "-"
    if size < 1000:
        return f"{size} B"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def log_dir_rows(broker_id: int, response: Any) -> tuple[list[tuple[str, ...]], list[str]]:
    """(a row per partition, a line per log directory) of one broker's DescribeLogDirs."""
    rows: list[tuple[str, ...]] = []
    lines: list[str] = []
    for result in response.results:
        directory = str(result.log_dir)
        if is_error(result.error_code):
            lines.append(f"broker {broker_id}: {directory}: {error_name(result.error_code)}")
            continue
        total = int(getattr(result, "total_bytes", -1))
        usable = int(getattr(result, "usable_bytes", -1))
        used = sum(int(p.partition_size) for t in result.topics for p in t.partitions)
        lines.append(
            f"broker {broker_id}: {directory}: {format_bytes(used)} in partitions, "
            f"{format_bytes(usable)} free of {format_bytes(total)}"
        )
        for topic in sorted(result.topics, key=lambda t: str(t.name)):
            for p in sorted(topic.partitions, key=lambda p: int(p.partition_index)):
                rows.append(
                    (
                        str(broker_id),
                        directory,
                        str(topic.name),
                        str(int(p.partition_index)),
                        format_bytes(int(p.partition_size)),
                        str(int(p.offset_lag)),
                    )
                )
    return rows, lines


async def fetch_log_dirs(
    session: WireSession, topics: Sequence[str]
) -> tuple[list[tuple[str, ...]], list[str]]:
    """Every broker's log directories (those of `topics` only, if any are given)."""
    version, cluster = await describe_cluster(session)
    wanted = None
    if topics:
        _, metadata = await session.call(
            METADATA,
            "Metadata",
            {
                "topics": [{"name": topic, "topic_id": None} for topic in topics],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            min_version=1,
            max_version=12,
        )
        wanted = [
            {"topic": str(t.name), "partitions": [int(p.partition_index) for p in t.partitions]}
            for t in metadata.topics
            if not is_error(t.error_code)
        ]
        missing = sorted(set(topics) - {w["topic"] for w in wanted})
        if missing:
            raise CommandError(f"no such topic: {', '.join(missing)}")
    rows: list[tuple[str, ...]] = []
    lines: list[str] = []
    for broker in brokers_from(cluster, fenced_known=version >= 2):
        node = WireSession(broker.address, session.timeout_s, session.security)
        try:
            _, answer = await node.call(
                DESCRIBE_LOG_DIRS, "DescribeLogDirs", {"topics": wanted}, max_version=4
            )
        except CommandError as exc:
            lines.append(f"broker {broker.node_id}: {exc.message}")
            continue
        finally:
            await node.close()
        broker_rows, broker_lines = log_dir_rows(broker.node_id, answer)
        rows += broker_rows
        lines += broker_lines
    return rows, lines


@cluster_app.command("log-dirs")
def log_dirs(
    topics: Annotated[
        list[str] | None,
        typer.Option("--topic", "-t", metavar="TOPIC", help="Only this topic (repeatable)."),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show where each broker keeps each partition and its size on disk, with each log
    directory's free space (DescribeLogDirs, as kafka-log-dirs.sh)."""
    with reporting_errors():
        rows, lines = run_session(
            bootstrap, timeout, lambda s: fetch_log_dirs(s, topics or []), command_config
        )
        print_table(LOG_DIR_HEADERS, rows)
        for line in lines:
            typer.echo(line)


# --- strom cluster unregister ----------------------------------------------------------

UNREGISTER_BROKER = 64


async def unregister_broker(session: WireSession, broker_id: int) -> None:
    _, answer = await session.call(
        UNREGISTER_BROKER, "UnregisterBroker", {"broker_id": broker_id}, max_version=0
    )
    if is_error(answer.error_code):
        reason = f": {answer.error_message}" if answer.error_message else ""
        raise CommandError(f"broker {broker_id}: {error_name(answer.error_code)}{reason}")


@cluster_app.command("unregister")
def unregister(
    broker_id: Annotated[
        int, typer.Argument(metavar="BROKER_ID", help="The id of the broker to remove.")
    ],
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Remove a broker that is gone for good from the cluster's metadata (UnregisterBroker,
    as kafka-cluster.sh unregister): its leaderships move to in-sync replicas first. A
    broker that still runs registers again at its next heartbeat."""
    with reporting_errors():
        run_session(bootstrap, timeout, lambda s: unregister_broker(s, broker_id), command_config)
        print(f"broker {broker_id} unregistered")
