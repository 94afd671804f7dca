"""Ending another process's transaction: the driver's half of the exactly-once sink.

A write task leaves its transaction open and hands Spark its transactional id, producer id
and epoch; the driver commits (or aborts) it with EndTxn once Spark has every task's
message. librdkafka has no call for a transaction it did not start, so this speaks to the
transaction coordinator with strom's own client (FindCoordinator, DescribeTransactions,
EndTxn), each call in a short asyncio loop of its own. EndTxn carries the epoch the task
had: if a newer attempt fenced that task since, the coordinator refuses it
(PRODUCER_FENCED), and the caller fails the batch rather than commit the wrong attempt.
The connections are secured as the write's kafka.* security options say
(`security_of`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from strom.client import ClientError, ClientSecurity, KafkaConnection
from strom.client.settings import security_from_settings
from strom.spark.errors import BrokerError, OptionError

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA, METADATA_VERSION = 3, 12
FIND_COORDINATOR, FIND_COORDINATOR_VERSION = 10, 3
END_TXN, END_TXN_VERSION = 26, 3
DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION = 65, 0
LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION = 66, 0
TRANSACTION_KEY_TYPE = 1
# Answers that mean "ask again in a moment", possibly at another coordinator.
RETRIABLE = {
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    51: "CONCURRENT_TRANSACTIONS",
}
ERROR_NAMES = {47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE", 90: "PRODUCER_FENCED"}
RETRY_S = 0.1
DEADLINE_S = 60.0


@dataclass(frozen=True, slots=True)
class PendingTransaction:
    """A task's open transaction, for the driver to end."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class _Refused:
    """A coordinator's error code."""

    code: int


def describe(
    bootstrap_servers: str, transactional_id: str, security: ClientSecurity | None = None
) -> PendingTransaction:
    """The producer id and epoch the coordinator holds now for `transactional_id`."""

    async def ask(connection: KafkaConnection) -> PendingTransaction | _Refused:
        response = await connection.request(
            DESCRIBE_TRANSACTIONS,
            DESCRIBE_TRANSACTIONS_VERSION,
            {"transactional_ids": (transactional_id,)},
        )
        state = response.transaction_states[0]
        code = _code(state.error_code)
        if code:
            return _Refused(code)
        return PendingTransaction(transactional_id, int(state.producer_id), state.producer_epoch)

    return _at_coordinator(bootstrap_servers, security, transactional_id, "describe", ask)


def end_transaction(
    bootstrap_servers: str,
    pending: PendingTransaction,
    *,
    commit: bool,
    security: ClientSecurity | None = None,
) -> None:
    """Commit or abort `pending` with its own producer id and epoch."""

    async def ask(connection: KafkaConnection) -> _Refused | None:
        response = await connection.request(
            END_TXN,
            END_TXN_VERSION,
            {
                "transactional_id": pending.transactional_id,
                "producer_id": pending.producer_id,
                "producer_epoch": pending.producer_epoch,
                "committed": commit,
            },
        )
        code = _code(response.error_code)
        return _Refused(code) if code else None

    what = "commit" if commit else "abort"
    _at_coordinator(bootstrap_servers, security, pending.transactional_id, what, ask)


def open_transactions(bootstrap_servers: str, security: ClientSecurity | None = None) -> set[str]:
    """The transactional ids with a transaction open (Ongoing) at any coordinator of the
    cluster: ListTransactions to every broker the cluster's metadata names."""

    async def run() -> set[str]:
        connection = await _any_server(bootstrap_servers, security)
        try:
            metadata = await connection.request(
                METADATA,
                METADATA_VERSION,
                {
                    "topics": (),
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
        finally:
            connection.close()
        found: set[str] = set()
        for broker in metadata.brokers:
            node = await _connect(broker.host, broker.port, security)
            try:
                response = await node.request(
                    LIST_TRANSACTIONS,
                    LIST_TRANSACTIONS_VERSION,
                    {"state_filters": ("Ongoing",), "producer_id_filters": ()},
                )
            finally:
                node.close()
            code = _code(response.error_code)
            if code:
                raise ClientError(f"ListTransactions at broker {broker.node_id}: error {code}")
            found.update(state.transactional_id for state in response.transaction_states)
        return found

    try:
        return asyncio.run(run())
    except (ClientError, OSError) as exc:
        raise BrokerError(f"strom: could not list the open transactions: {exc}") from None


def _code(error_code: Any) -> int:
    return int(getattr(error_code, "value", error_code))


def _at_coordinator(
    bootstrap_servers: str,
    security: ClientSecurity | None,
    transactional_id: str,
    what: str,
    call: Callable[[KafkaConnection], Awaitable[T | _Refused]],
) -> T:
    """Run `call` at the id's coordinator until it answers something other than an error
    code that says to retry; any other error code raises BrokerError."""

    async def run() -> T:
        deadline = time.monotonic() + DEADLINE_S
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                connection = await _coordinator(bootstrap_servers, security, transactional_id)
                try:
                    result = await call(connection)
                finally:
                    connection.close()
            except (ClientError, OSError) as exc:
                last = str(exc)
            else:
                if not isinstance(result, _Refused):
                    return result
                if result.code not in RETRIABLE:
                    name = ERROR_NAMES.get(result.code, f"error {result.code}")
                    raise BrokerError(
                        f"strom: could not {what} the transaction of {transactional_id}: {name}"
                    )
                last = RETRIABLE[result.code]
            await asyncio.sleep(RETRY_S)
        raise BrokerError(
            f"strom: could not {what} the transaction of {transactional_id} within "
            f"{DEADLINE_S:g} s: {last}"
        )

    return asyncio.run(run())


async def _coordinator(
    bootstrap_servers: str, security: ClientSecurity | None, transactional_id: str
) -> KafkaConnection:
    """A connection to the coordinator of `transactional_id`, found through any server."""
    connection = await _any_server(bootstrap_servers, security)
    try:
        response = await connection.request(
            FIND_COORDINATOR,
            FIND_COORDINATOR_VERSION,
            {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE},
        )
    finally:
        connection.close()
    code = _code(response.error_code)
    if code:
        raise ClientError(f"FindCoordinator: {RETRIABLE.get(code, f'error {code}')}")
    return await _connect(response.host, response.port, security)


async def _connect(host: str, port: int, security: ClientSecurity | None) -> KafkaConnection:
    return await KafkaConnection.connect(host, port, client_id="strom-spark", security=security)


async def _any_server(bootstrap_servers: str, security: ClientSecurity | None) -> KafkaConnection:
    """A connection to the first of `bootstrap_servers` that takes one."""
    last: Exception | None = None
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            return await _connect(host, int(port), security)
        except (ClientError, OSError, ValueError) as exc:
            last = exc
    raise ClientError(f"no server of {bootstrap_servers} answered: {last}")


def security_of(client_config: Mapping[str, str]) -> ClientSecurity | None:
    """The TLS and SASL login a write's kafka.* options ask for (strom.client.settings);
    OptionError for one strom's client cannot do."""
    try:
        return security_from_settings(client_config)
    except ValueError as exc:
        key = getattr(exc, "key", "security.protocol")  # OAUTHBEARER's name theirs
        raise OptionError(f"kafka.{key}", str(exc)) from None
