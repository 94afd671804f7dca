"""`strom txn ...`: list and describe transactions and producers, abort a hanging one.

strom's counterpart of Kafka's `kafka-transactions.sh`. confluent-kafka 2.16's admin
client has no transaction or producer APIs, so every call goes through strom's own
client (wire.py): Metadata for the brokers and partition leaders, ListTransactions at
every broker, FindCoordinator (key type 1) then DescribeTransactions at the id's
coordinator, DescribeProducers at a partition's leader, and WriteTxnMarkers there to
abort. It works against any Kafka-compatible cluster. What needs no broker is in
txn_model.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    ExitCode,
    TimeoutOption,
    echo_error,
    echo_status,
    print_table,
    reporting_errors,
    usage_error,
)
from strom.cli.txn_model import (
    LIST_HEADERS,
    PARTITION_HEADERS,
    PRODUCER_HEADERS,
    AbortSpec,
    BrokerAddress,
    CoordinatorMoved,
    ProducerInfo,
    TxnDescription,
    TxnListing,
    abort_spec,
    brokers_from_metadata,
    coordinator_from,
    description_from,
    description_lines,
    list_rows,
    listings_from,
    marker_errors,
    parse_states,
    partition_leader,
    partition_rows,
    producer_rows,
    producers_from,
)
from strom.cli.wire import (
    WireSession,
    format_address,
    read_client_security,
)

if TYPE_CHECKING:
    from strom.client import ClientSecurity

T = TypeVar("T")

txn_app = typer.Typer(
    name="txn",
    help="List and describe transactions and producers, and abort hanging transactions.",
    no_args_is_help=True,
)

METADATA = 3
FIND_COORDINATOR = 10
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
TRANSACTION_KEY = 1
_RETRY_S = 0.1

TopicOption = Annotated[str, typer.Option("--topic", help="Topic name.", show_default=False)]
PartitionOption = Annotated[
    int, typer.Option("--partition", min=0, help="Partition number.", show_default=False)
]


class TxnCluster:
    """The bootstrap connection, and one connection per broker asked, opened on demand."""

    def __init__(
        self, bootstrap: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.timeout_s = timeout_s
        self.security = security
        self.bootstrap = WireSession(bootstrap, timeout_s, security)
        self.sessions: dict[str, WireSession] = {}

    async def metadata(self, topic: str | None = None) -> Any:
        topics = None if topic is None else [{"name": topic, "topic_id": None}]
        _, response = await self.bootstrap.call(
            METADATA,
            "Metadata",
            {
                "topics": topics,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            min_version=1,
            max_version=12,
        )
        return response

    def session(self, broker: BrokerAddress) -> WireSession:
        address = broker.address
        if self.bootstrap.address is not None and format_address(*self.bootstrap.address) == (
            address
        ):
            return self.bootstrap
        if address not in self.sessions:
            self.sessions[address] = WireSession(address, self.timeout_s, self.security)
        return self.sessions[address]

    def broker(self, node_id: int, brokers: tuple[BrokerAddress, ...]) -> BrokerAddress:
        found = next((b for b in brokers if b.node_id == node_id), None)
        if found is None:
            raise CommandError(f"broker {node_id} is not in the cluster's metadata")
        return found

    async def close(self) -> None:
        for session in [self.bootstrap, *self.sessions.values()]:
            await session.close()


async def at_coordinator(
    cluster: TxnCluster,
    key: str,
    key_type: int,
    coordinator_of: Callable[[Any], BrokerAddress],
    ask: Callable[[WireSession, BrokerAddress], Awaitable[T]],
) -> T:
    """FindCoordinator of `key` (0: a group, 1: a transactional id), read by
    `coordinator_of`, then `ask` there; looked up again while the coordinator moves
    or loads (CoordinatorMoved), until the timeout."""
    deadline = time.monotonic() + cluster.timeout_s
    while True:
        try:
            _, response = await cluster.bootstrap.call(
                FIND_COORDINATOR,
                "FindCoordinator",
                {"key": key, "key_type": key_type, "coordinator_keys": [key]},
                min_version=1,
                max_version=6,
            )
            coordinator = coordinator_of(response)
            return await ask(cluster.session(coordinator), coordinator)
        except CoordinatorMoved:
            if time.monotonic() + _RETRY_S > deadline:
                raise
        await asyncio.sleep(_RETRY_S)


def run(
    bootstrap: str,
    timeout_s: float,
    work: Callable[[TxnCluster], Awaitable[T]],
    command_config: Path | None = None,
) -> T:
    """Run `work` against the cluster, closing every connection afterwards, secured as
    the command config says (see wire.py)."""
    security = read_client_security(command_config)

    async def main() -> T:
        cluster = TxnCluster(bootstrap, timeout_s, security)
        try:
            return await work(cluster)
        finally:
            await cluster.close()

    return asyncio.run(main())


# --- list -------------------------------------------------------------------------------


async def list_at(
    cluster: TxnCluster,
    broker: BrokerAddress,
    states: list[str],
    producer_ids: list[int],
    duration_ms: int,
) -> tuple[list[TxnListing], list[str]]:
    """(listings, the state filters the broker did not know) of one broker."""
    _, response = await cluster.session(broker).call(
        LIST_TRANSACTIONS,
        "ListTransactions",
        {
            "state_filters": states,
            "producer_id_filters": producer_ids,
            "duration_filter": duration_ms,
        },
        min_version=1 if duration_ms >= 0 else 0,
        max_version=1,
    )
    return listings_from(response, broker.node_id), [str(s) for s in response.unknown_state_filters]


async def list_everywhere(
    cluster: TxnCluster, states: list[str], producer_ids: list[int], duration_ms: int
) -> tuple[list[TxnListing], list[str], list[str]]:
    """(every broker's listings, warnings, failures)."""
    brokers = brokers_from_metadata(await cluster.metadata())
    answers = await asyncio.gather(
        *(list_at(cluster, b, states, producer_ids, duration_ms) for b in brokers),
        return_exceptions=True,
    )
    listings: list[TxnListing] = []
    warnings: set[str] = set()
    failures: list[str] = []
    for broker, answer in zip(brokers, answers, strict=True):
        if isinstance(answer, CommandError):
            failures.append(f"broker {broker.node_id} ({broker.address}): {answer.message}")
        elif isinstance(answer, BaseException):
            raise answer
        else:
            listings += answer[0]
            warnings.update(answer[1])
    notes = [f"broker does not know state {name!r}" for name in sorted(warnings)]
    return listings, notes, failures


@txn_app.command("list")
def list_transactions(
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Only transactions in this state (repeatable): Empty, Ongoing, "
            "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence.",
        ),
    ] = None,
    producer_ids: Annotated[
        list[int] | None,
        typer.Option(
            "--producer-id", metavar="ID", min=0, help="Only this producer id (repeatable)."
        ),
    ] = None,
    duration_ms: Annotated[
        int | None,
        typer.Option(
            "--duration-filter",
            metavar="MS",
            min=0,
            help="Only transactions running longer than this many milliseconds "
            "(needs ListTransactions v1: Kafka 3.8 or later).",
        ),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """List the transactional ids of every broker: coordinator, producer id and state."""
    with reporting_errors():
        wanted_states = parse_states(states or [])
        listings, notes, failures = run(
            bootstrap,
            timeout,
            lambda cluster: list_everywhere(
                cluster,
                wanted_states,
                list(producer_ids or []),
                -1 if duration_ms is None else duration_ms,
            ),
            command_config,
        )
        for note in notes:
            echo_status(f"strom: warning: {note}")
        if listings:
            print_table(LIST_HEADERS, list_rows(listings))
        else:
            echo_status("no transactions")
        if failures:
            for failure in failures:
                echo_error(failure)
            raise CommandError(
                f"{len(failures)} broker(s) did not answer: the list is incomplete",
                ExitCode.KAFKA_ERROR,
            )


# --- describe ---------------------------------------------------------------------------


async def describe_transaction(cluster: TxnCluster, txn_id: str) -> TxnDescription:
    """FindCoordinator, then DescribeTransactions there (`at_coordinator`)."""

    async def ask(session: WireSession, coordinator: BrokerAddress) -> TxnDescription:
        _, response = await session.call(
            DESCRIBE_TRANSACTIONS,
            "DescribeTransactions",
            {"transactional_ids": [txn_id]},
            max_version=0,
        )
        return description_from(response, coordinator, txn_id)

    return await at_coordinator(
        cluster, txn_id, TRANSACTION_KEY, lambda r: coordinator_from(r, txn_id), ask
    )


@txn_app.command("describe")
def describe(
    transactional_id: Annotated[
        str,
        typer.Option("--transactional-id", help="Transactional id.", show_default=False),
    ],
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show a transactional id's state, its coordinator and its partitions.

    Also its producer id and epoch, its timeout and when its open transaction started."""
    with reporting_errors():
        if not transactional_id:
            raise usage_error("--transactional-id must not be empty")
        found = run(
            bootstrap, timeout, lambda c: describe_transaction(c, transactional_id), command_config
        )
        print("\n".join(description_lines(found, int(time.time() * 1000))))
        if found.partitions:
            print()
            print_table(PARTITION_HEADERS, partition_rows(found.partitions))


# --- producers --------------------------------------------------------------------------


async def _replica(
    cluster: TxnCluster, topic: str, partition: int, broker_id: int | None
) -> BrokerAddress:
    """The partition's leader, or the broker asked for."""
    metadata = await cluster.metadata(topic)
    brokers = brokers_from_metadata(metadata)
    leader = partition_leader(metadata, topic, partition)
    return cluster.broker(leader if broker_id is None else broker_id, brokers)


async def describe_producers(
    cluster: TxnCluster, topic: str, partition: int, broker_id: int | None = None
) -> tuple[BrokerAddress, list[ProducerInfo]]:
    replica = await _replica(cluster, topic, partition, broker_id)
    _, response = await cluster.session(replica).call(
        DESCRIBE_PRODUCERS,
        "DescribeProducers",
        {"topics": [{"name": topic, "partition_indexes": [partition]}]},
        max_version=0,
    )
    where = f"broker {replica.node_id} ({replica.address})"
    return replica, producers_from(response, topic, partition, where)


@txn_app.command("describe-producers")
def describe_producers_command(
    topic: TopicOption,
    partition: PartitionOption,
    broker_id: Annotated[
        int | None,
        typer.Option(
            "--broker-id",
            min=0,
            help="Ask this replica instead of the leader.",
            show_default=False,
        ),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show the producers a partition knows, and where their open transactions start.

    Per producer: id, epoch, last sequence and timestamp, coordinator epoch, and the
    offset where its open transaction starts."""
    with reporting_errors():
        replica, producers = run(
            bootstrap,
            timeout,
            lambda c: describe_producers(c, topic, partition, broker_id),
            command_config,
        )
        echo_status(f"{topic}-{partition} at broker {replica.node_id} ({replica.address})")
        if producers:
            print_table(PRODUCER_HEADERS, producer_rows(producers))
        else:
            echo_status("no active producers")


# --- abort ------------------------------------------------------------------------------


async def abort_transaction(
    cluster: TxnCluster, topic: str, partition: int, start_offset: int
) -> tuple[AbortSpec, BrokerAddress]:
    """Find the producer whose transaction starts at `start_offset` at the partition's
    leader, and write an ABORT marker there with its producer id and epochs."""
    leader, producers = await describe_producers(cluster, topic, partition)
    spec = abort_spec(producers, topic, partition, start_offset)
    _, response = await cluster.session(leader).call(
        WRITE_TXN_MARKERS, "WriteTxnMarkers", spec.request(), min_version=1, max_version=1
    )
    refused = marker_errors(response)
    if refused:
        raise CommandError(
            f"cannot abort the transaction of producer {spec.producer_id} at "
            f"{topic}-{partition}: {', '.join(refused)}"
        )
    return spec, leader


@txn_app.command("abort")
def abort(
    topic: TopicOption,
    partition: PartitionOption,
    start_offset: Annotated[
        int,
        typer.Option(
            "--start-offset",
            min=0,
            help="The offset where the open transaction to abort starts (see describe-producers).",
            show_default=False,
        ),
    ],
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Abort a hanging transaction on one partition.

    Writes an ABORT marker for the producer whose open transaction starts at
    --start-offset, as Kafka's tool does.

    Only the partition learns of it: the transaction's coordinator is not told. Use it
    for a transaction its coordinator no longer completes, so that read_committed
    consumers move past it."""
    with reporting_errors():
        spec, leader = run(
            bootstrap,
            timeout,
            lambda c: abort_transaction(c, topic, partition, start_offset),
            command_config,
        )
        print(
            f"aborted the transaction of producer {spec.producer_id} (epoch "
            f"{spec.producer_epoch}) starting at offset {spec.start_offset} on "
            f"{topic}-{partition} (leader: broker {leader.node_id})"
        )
