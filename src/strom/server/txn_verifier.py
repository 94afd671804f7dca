"""KIP-890's defence on the write side: before a transactional batch opens a transaction
on a partition, ask the transaction coordinator of its transactional id whether the
partition is in the producer's open transaction (or, for transaction version 2 clients,
have it added). A late or retried batch of a transaction that already ended is then
refused instead of leaving a transaction open on the partition that no marker will ever
close (a "hanging" transaction, which would stall read_committed consumers for good).

The coordinator is asked in process when this broker leads the id's partition of
`__transaction_state`, else with AddPartitionsToTxn v4+ (a batch of transactions, each
`verify_only`, or not for transaction version 2) over the inter-broker client. As in
Kafka's AddPartitionsToTxnManager, each coordinator broker has at most one request in
flight: verifications arriving meanwhile wait and go together in the next one, and a
second verification of the same transactional id replaces the first (a higher epoch
fences the older one, the same epoch is a retry).

Between the answer and the append a marker of the same producer may reach the partition
(the transaction ended meanwhile): a `VerificationGuard` taken before asking sees it
(`TxnVerifier.on_marker`, called where markers are appended), and the append is refused.

The error translations are Kafka's (AddPartitionsToTxnManager, ReplicaManager):
`coordinator_error` maps an answer of the coordinator, `produce_error` what a producer
is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient, UnsupportedVersionError
from strom.client.security import ClientSecurity
from strom.group.placement import partition_for
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.server.tasks import TaskSet
from strom.server.transactions import TxnUnavailable

if TYPE_CHECKING:
    from strom.server.handlers.ports import TxnCoordination

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

REQUEST_TIMEOUT_S = 30.0
"""Kafka's `request.timeout.ms` for the inter-broker AddPartitionsToTxn."""
RETRY_BACKOFF_S = 0.020
"""`add.partitions.to.txn.retry.backoff.ms`: between two tries of a produce's implicit
add that met CONCURRENT_TRANSACTIONS (the previous transaction is still completing)."""
RETRY_MAX_S = 0.100
"""`add.partitions.to.txn.retry.backoff.max.ms`: how long those tries go on."""
_BROKER_VERSIONS = (4, 5)
"""AddPartitionsToTxn versions a broker sends: v4 introduced the batched broker form."""
_UNVERIFIED = "Unable to verify the partition has been added to the transaction."


class VerifyOperation(Enum):
    """What a transactional write's request version lets the broker do (Kafka's
    TransactionSupportedOperation)."""

    DEFAULT_ERROR = "default"
    """Produce v0-v10, TxnOffsetCommit v0-v3: verify only; TRANSACTION_ABORTABLE is
    told as INVALID_TXN_STATE, which these clients know."""
    GENERIC_ERROR_SUPPORTED = "abortable"
    """Produce v11, TxnOffsetCommit v4: verify only; TRANSACTION_ABORTABLE as is."""
    ADD_PARTITION = "add"
    """Produce v12+, TxnOffsetCommit v5+ (transaction version 2): the write adds its
    partition to the transaction itself (KIP-890 part 2)."""

    @property
    def adds(self) -> bool:
        return self is VerifyOperation.ADD_PARTITION

    @classmethod
    def for_produce(cls, version: int) -> VerifyOperation:
        if version > 11:
            return cls.ADD_PARTITION
        return cls.GENERIC_ERROR_SUPPORTED if version > 10 else cls.DEFAULT_ERROR

    @classmethod
    def for_txn_offset_commit(cls, version: int) -> VerifyOperation:
        if version > 4:
            return cls.ADD_PARTITION
        return cls.GENERIC_ERROR_SUPPORTED if version > 3 else cls.DEFAULT_ERROR


def coordinator_error(error: ErrorCode, operation: VerifyOperation) -> ErrorCode:
    """A partition's answer from the coordinator, as the writer's broker keeps it."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # what producers expect here
    if error == ErrorCode.transaction_abortable and operation is VerifyOperation.DEFAULT_ERROR:
        return ErrorCode.invalid_txn_state
    return error


_RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def produce_error(error: ErrorCode, operation: VerifyOperation) -> tuple[ErrorCode, str | None]:
    """What a producer is told when its partition failed verification. Retriable
    coordinator troubles become NOT_ENOUGH_REPLICAS, which every producer retries without
    refreshing its metadata; transaction version 2 clients hear CONCURRENT_TRANSACTIONS
    as is (common while the previous transaction completes)."""
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS or (
        error == ErrorCode.concurrent_transactions and not operation.adds
    ):
        return (
            ErrorCode.not_enough_replicas,
            f"{_UNVERIFIED} Underlying error: {error.name.upper()}",
        )
    return error, None


_GROUP_COORDINATOR_ERRORS = {
    # Kafka's group coordinator turns a write's errors into ones its clients retry well;
    # NETWORK_EXCEPTION, which old clients do not retry, is told as a loading coordinator.
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


def txn_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """What a TxnOffsetCommit is told when its group's partition failed verification
    (every offset of the request gets it)."""
    return _GROUP_COORDINATOR_ERRORS.get(error, error)


@dataclass(slots=True, eq=False)
class VerificationGuard:
    """Valid until a marker of the producer reaches the partition."""

    key: tuple[str, int, int]
    valid: bool = True


@dataclass(frozen=True, slots=True)
class VerifierPorts:
    node_id: int
    image: Callable[[], MetadataImage]
    """The committed metadata image: where the coordinator broker listens."""
    txns: TxnCoordination
    """This broker's transaction coordinator, asked in process for the ids it leads."""
    enabled: Callable[[], bool] = lambda: True
    """`transaction.partition.verification.enable` now (it changes at run time). Off, a
    write that only verifies is let through unasked, as Kafka's broker does; one that
    adds its partition (transaction version 2) still asks."""
    security: Callable[[], ClientSecurity | None] = lambda: None
    """How connections to other brokers are secured (the inter-broker listener's)."""


@dataclass(slots=True, eq=False)
class _Asked:
    """One transaction's verification waiting for (or in) a request to its coordinator."""

    txn_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    operation: VerifyOperation
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]]

    def tell(self, errors: dict[TopicPartition, ErrorCode]) -> None:
        if not self.answer.done():
            self.answer.set_result(errors)

    def fail_all(self, error: ErrorCode) -> None:
        self.tell(dict.fromkeys(self.partitions, error))


@dataclass(slots=True, eq=False)
class _CoordinatorLink:
    """One coordinator broker: the verifications waiting for it; one request at a time."""

    broker_id: int
    address: tuple[str, int]
    client: NodeClient
    waiting: dict[str, _Asked] = field(default_factory=dict)
    in_flight: list[_Asked] = field(default_factory=list)
    sending: bool = False


class TxnVerifier:
    """Idle -> asking (per coordinator broker: one request in flight, others waiting)."""

    def __init__(self, ports: VerifierPorts) -> None:
        self._ports = ports
        self._links: dict[int, _CoordinatorLink] = {}
        self._guards: dict[tuple[str, int, int], list[VerificationGuard]] = {}
        self._tasks = TaskSet(f"[node {ports.node_id}] txn verifier")
        self._closed = False

    # --- guards ------------------------------------------------------------------------

    def guard(self, topic: str, index: int, producer_id: int) -> VerificationGuard:
        key = (topic, index, producer_id)
        guard = VerificationGuard(key)
        self._guards.setdefault(key, []).append(guard)
        return guard

    def release(self, guard: VerificationGuard) -> None:
        guards = self._guards.get(guard.key)
        if guards is not None and guard in guards:
            guards.remove(guard)
            if not guards:
                del self._guards[guard.key]

    def on_marker(self, topic: str, index: int, producer_id: int) -> None:
        """A COMMIT or ABORT marker of `producer_id` was appended to the partition: the
        verifications of it that are on their way no longer hold."""
        for guard in self._guards.pop((topic, index, producer_id), []):
            guard.valid = False

    # --- verification ------------------------------------------------------------------

    async def verify(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        operation: VerifyOperation,
    ) -> dict[TopicPartition, ErrorCode]:
        if not operation.adds and not self._ports.enabled():
            return {}
        return await self._ask(txn_id, producer_id, producer_epoch, partitions, operation)

    async def _ask(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        operation: VerifyOperation,
    ) -> dict[TopicPartition, ErrorCode]:
        txns = self._ports.txns
        leader = txns.leader_of(partition_for(txn_id, txns.num_partitions))
        if leader == self._ports.node_id:
            return await self._ask_here(txn_id, producer_id, producer_epoch, partitions, operation)
        registered = self._ports.image().brokers.get(leader)
        if leader < 0 or registered is None or registered.fenced or self._closed:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        link = self._link(leader, (registered.host, registered.port))
        asked = _Asked(
            txn_id,
            producer_id,
            producer_epoch,
            partitions,
            operation,
            asyncio.get_running_loop().create_future(),
        )
        self._enqueue(link, asked)
        return await asked.answer

    async def _ask_here(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        operation: VerifyOperation,
    ) -> dict[TopicPartition, ErrorCode]:
        txns = self._ports.txns
        try:
            if operation.adds:
                result = await txns.add_partitions(
                    txn_id, producer_id, producer_epoch, partitions, transaction_version=2
                )
                answers = dict.fromkeys(partitions, result.error)
            else:
                result = await txns.verify_partitions(
                    txn_id, producer_id, producer_epoch, partitions
                )
                answers = {p: result.partition_errors.get(p, result.error) for p in partitions}
        except TxnUnavailable as exc:
            answers = dict.fromkeys(partitions, exc.error_code)
        return {
            p: coordinator_error(error, operation)
            for p, error in answers.items()
            if error != ErrorCode.none
        }

    # --- the inter-broker requests -----------------------------------------------------

    def _link(self, broker_id: int, address: tuple[str, int]) -> _CoordinatorLink:
        old = self._links.get(broker_id)
        security = self._ports.security()
        if old is not None and old.address == address and old.client.security is security:
            return old
        client = NodeClient(
            *address,
            client_id=f"strom-txn-verifier-{self._ports.node_id}",
            node_id=broker_id,
            security=security,
        )
        link = self._links[broker_id] = _CoordinatorLink(broker_id, address, client)
        if old is not None:
            # The broker moved, or a dynamic config changed how brokers connect: what is
            # in flight fails (its producers retry), what waits goes to the new client.
            old.client.close()
            link.waiting, old.waiting = old.waiting, {}
        return link

    def _enqueue(self, link: _CoordinatorLink, asked: _Asked) -> None:
        waiting = link.waiting.get(asked.txn_id)
        if waiting is not None:
            if waiting.producer_epoch > asked.producer_epoch:
                asked.fail_all(ErrorCode.invalid_producer_epoch)  # fenced by the waiting one
                return
            waiting.fail_all(
                ErrorCode.invalid_producer_epoch
                if waiting.producer_epoch < asked.producer_epoch
                else ErrorCode.network_exception  # a retry: the client asks again
            )
        link.waiting[asked.txn_id] = asked
        if not link.sending:
            link.sending = True
            self._tasks.spawn(self._send(link), f"txn-verify-{link.broker_id}")

    async def _send(self, link: _CoordinatorLink) -> None:
        try:
            while link.waiting and not link.client.is_closed:
                batch, link.waiting = list(link.waiting.values()), {}
                link.in_flight = batch
                await self._exchange(link, batch)
                link.in_flight = []
        finally:
            link.sending = False
            for asked in [*link.in_flight, *link.waiting.values()]:
                asked.fail_all(ErrorCode.network_exception)
            link.in_flight, link.waiting = [], {}

    async def _exchange(self, link: _CoordinatorLink, batch: list[_Asked]) -> None:
        body = {"transactions": [_transaction(asked) for asked in batch]}
        try:
            response = await link.client.request(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                body,
                min_version=_BROKER_VERSIONS[0],
                max_version=_BROKER_VERSIONS[1],
                timeout_s=REQUEST_TIMEOUT_S,
            )
        except UnsupportedVersionError as exc:
            # A coordinator that cannot verify: write without verification, as Kafka does.
            log.warning(
                "[node %d] broker %d cannot verify transactions (%s); writing unverified",
                self._ports.node_id,
                link.broker_id,
                exc,
            )
            for asked in batch:
                asked.tell({})
            return
        except (ClientError, OSError, TimeoutError) as exc:
            log.info(
                "[node %d] AddPartitionsToTxn to broker %d failed: %s",
                self._ports.node_id,
                link.broker_id,
                exc,
            )
            for asked in batch:
                asked.fail_all(ErrorCode.network_exception)
            return
        _answer(batch, response)

    async def stop(self) -> None:
        self._closed = True
        for link in self._links.values():
            link.client.close()
        await self._tasks.stop()
        for link in self._links.values():
            for asked in [*link.in_flight, *link.waiting.values()]:
                asked.fail_all(ErrorCode.network_exception)


def _transaction(asked: _Asked) -> dict[str, Any]:
    topics: dict[str, list[int]] = {}
    for topic, index in asked.partitions:
        topics.setdefault(topic, []).append(index)
    return {
        "transactional_id": asked.txn_id,
        "producer_id": asked.producer_id,
        "producer_epoch": asked.producer_epoch,
        "verify_only": not asked.operation.adds,
        "topics": [{"name": name, "partitions": indexes} for name, indexes in topics.items()],
    }


def _answer(batch: Iterable[_Asked], response: Any) -> None:
    """Tell each verification what the coordinator answered."""
    top = ErrorCode(int(response.error_code))
    by_id: dict[str, dict[TopicPartition, ErrorCode]] = {}
    for result in response.results_by_transaction:
        errors = by_id.setdefault(str(result.transactional_id), {})
        for topic in result.topic_results:
            for partition in topic.results_by_partition:
                code = ErrorCode(int(partition.partition_error_code))
                if code != ErrorCode.none:
                    errors[(str(topic.name), int(partition.partition_index))] = code
    for asked in batch:
        if top != ErrorCode.none:
            # A client must not see CLUSTER_AUTHORIZATION_FAILED for its own write.
            asked.fail_all(
                ErrorCode.invalid_txn_state
                if top == ErrorCode.cluster_authorization_failed
                else top
            )
            continue
        errors = by_id.get(asked.txn_id, {})
        asked.tell(
            {
                p: coordinator_error(errors[p], asked.operation)
                for p in asked.partitions
                if p in errors
            }
        )
