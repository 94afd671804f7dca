"""`strom txn` against a real broker (the `strom_broker` fixture), with confluent-kafka's
transactional producer: an open transaction is listed and described, its start offset is
found with describe-producers, and the abort of a hanging transaction (a producer closed
without ending it, with a long transaction.timeout.ms) lets a read_committed consumer
past it."""

from __future__ import annotations

import gc
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from broker import free_port
from client_helpers import CLIENT_TIMEOUT_S, unique_topic, wait_until
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from test_group_cli import strom, table

from strom.testing import StromCluster

LONG_TIMEOUT_MS = 600_000  # the coordinator will not abort it within the test


def abort(bootstrap: str, topic: str, start: int) -> subprocess.CompletedProcess[str]:
    """`strom txn abort` of the transaction starting at `start` on partition 0."""
    return strom(
        "txn",
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        str(start),
        "-b",
        bootstrap,
    )


def fields(output: str) -> dict[str, str]:
    """`Key:  value` lines of a description."""
    found = {}
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep and "  " in value:
            found[key] = value.strip()
    return found


@pytest.fixture
def producers() -> Iterator[list[Producer]]:
    started: list[Producer] = []
    try:
        yield started
    finally:
        for producer in started:
            producer.close()


def transactional(bootstrap: str, txn_id: str, started: list[Producer]) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": LONG_TIMEOUT_MS,
        }
    )
    started.append(producer)
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def produce(producer: Producer, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """Write `values` to one partition and wait for them; their offsets."""
    offsets: list[int] = []

    def delivered(error: object, message: Message) -> None:
        assert error is None, error
        offsets.append(message.offset())

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return sorted(offsets)


def test_list_describe_and_describe_producers_show_an_open_transaction(
    strom_broker: StromCluster, producers: list[Producer]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("txcli")
    strom_broker.create_topic(topic, partitions=2)
    txn_id = f"app-{uuid.uuid4().hex[:8]}"
    producer = transactional(bootstrap, txn_id, producers)
    producer.begin_transaction()
    produce(producer, topic, 0, [b"a"])
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    offsets = produce(producer, topic, 0, [b"b", b"c", b"d"])
    produce(producer, topic, 1, [b"e"])

    listed = strom("txn", "list", "-b", bootstrap)
    assert listed.returncode == 0, listed.stderr
    row = next(
        r for r in table(listed.stdout, "TRANSACTIONAL ID") if r["TRANSACTIONAL ID"] == txn_id
    )
    assert row["STATE"] == "Ongoing" and row["COORDINATOR"] == "1"
    producer_id = row["PRODUCER ID"]

    ongoing = strom(
        "txn", "list", "--state", "ongoing", "--producer-id", producer_id, "-b", bootstrap
    )
    assert ongoing.returncode == 0, ongoing.stderr
    assert [r["TRANSACTIONAL ID"] for r in table(ongoing.stdout, "TRANSACTIONAL ID")] == [txn_id]
    committed = strom("txn", "list", "--state", "CompleteCommit", "-b", bootstrap)
    assert committed.returncode == 0 and txn_id not in committed.stdout
    long_running = strom("txn", "list", "--duration-filter", "3600000", "-b", bootstrap)
    assert long_running.returncode == 0 and txn_id not in long_running.stdout

    described = strom("txn", "describe", "--transactional-id", txn_id, "-b", bootstrap)
    assert described.returncode == 0, described.stderr
    info = fields(described.stdout)
    assert info["State"] == "Ongoing"
    assert info["Producer id"] == producer_id and info["Producer epoch"] == "0"
    assert info["Timeout"] == f"{LONG_TIMEOUT_MS} ms"
    assert info["Coordinator"].startswith("node 1 (")
    assert info["Started"].endswith("ago)")
    partitions = table(described.stdout, "TOPIC")
    assert [(r["TOPIC"], r["PARTITION"]) for r in partitions] == [(topic, "0"), (topic, "1")]

    shown = strom(
        "txn", "describe-producers", "--topic", topic, "--partition", "0", "-b", bootstrap
    )
    assert shown.returncode == 0, shown.stderr
    (state,) = table(shown.stdout, "PRODUCER ID")
    assert state["PRODUCER ID"] == producer_id
    assert state["TXN START OFFSET"] == str(offsets[0])
    assert state["LAST SEQUENCE"] == "3"  # a, then b c d: sequences 0-3
    assert state["COORDINATOR EPOCH"] != "-"  # the COMMIT marker of the first transaction

    producer.commit_transaction(CLIENT_TIMEOUT_S)

    def complete() -> bool:
        again = strom("txn", "describe", "--transactional-id", txn_id, "-b", bootstrap)
        return fields(again.stdout).get("State") == "CompleteCommit"

    wait_until(complete, CLIENT_TIMEOUT_S, "the transaction completing")
    after = strom("txn", "describe", "--transactional-id", txn_id, "-b", bootstrap)
    assert fields(after.stdout)["Partitions"] == "0"


def read_committed(bootstrap: str, topic: str, wanted: bytes, partition: int = 0) -> list[bytes]:
    """What a read_committed consumer of a partition reads until it has read `wanted`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []

    def poll() -> bool:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            values.append(message.value())
        return wanted in values

    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        wait_until(poll, CLIENT_TIMEOUT_S, f"{wanted!r} read_committed")
    finally:
        consumer.close()
    return values


def test_abort_of_a_hanging_transaction_lets_read_committed_consumers_past_it(
    strom_broker: StromCluster, producers: list[Producer]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("hanging")
    strom_broker.create_topic(topic, partitions=1)
    txn_id = f"hanging-{uuid.uuid4().hex[:8]}"
    hanging = transactional(bootstrap, txn_id, producers)
    hanging.begin_transaction()
    start = produce(hanging, topic, 0, [b"lost-1", b"lost-2"])[0]
    # Destroyed without close(), which would abort it: the transaction is left open at
    # its coordinator and on the partition for 10 minutes, as after a crash.
    producers.remove(hanging)
    del hanging
    gc.collect()
    plain = Producer({"bootstrap.servers": bootstrap})
    produce(plain, topic, 0, [b"after"])

    # The hanging transaction holds the last stable offset: nothing is readable.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        polled = [consumer.poll(0.1) for _ in range(10)]
        assert [m.value() for m in polled if m is not None and m.error() is None] == []
    finally:
        consumer.close()

    wrong = abort(bootstrap, topic, start + 1)
    assert wrong.returncode == 1
    assert f"no open transaction starts at offset {start + 1}" in wrong.stderr
    assert f"open transactions start at {start}" in wrong.stderr

    aborted = abort(bootstrap, topic, start)
    assert aborted.returncode == 0, aborted.stderr
    assert f"starting at offset {start} on {topic}-0" in aborted.stdout

    assert read_committed(bootstrap, topic, b"after") == [b"after"]
    shown = strom(
        "txn", "describe-producers", "--topic", topic, "--partition", "0", "-b", bootstrap
    )
    assert all(r["TXN START OFFSET"] == "-" for r in table(shown.stdout, "PRODUCER ID"))
    again = abort(bootstrap, topic, start)
    assert again.returncode == 1 and "no transaction is open there" in again.stderr


def test_errors_are_said_plainly(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("txerr")
    strom_broker.create_topic(topic, partitions=1)

    unknown = strom("txn", "describe", "--transactional-id", "no-such-id", "-b", bootstrap)
    assert unknown.returncode == 1
    assert unknown.stderr == "strom: transactional id 'no-such-id' does not exist\n"

    no_topic = strom(
        "txn", "describe-producers", "--topic", "no-such-topic", "--partition", "0", "-b", bootstrap
    )
    assert (no_topic.returncode, no_topic.stderr) == (
        1,
        "strom: topic 'no-such-topic' does not exist\n",
    )
    no_partition = strom(
        "txn", "abort", "--topic", topic, "--partition", "3", "--start-offset", "0", "-b", bootstrap
    )
    assert no_partition.returncode == 1
    assert "has no partition 3 (it has 1: 0-0)" in no_partition.stderr
    no_broker = strom(
        "txn",
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
        "--broker-id",
        "42",
        "-b",
        bootstrap,
    )
    assert (no_broker.returncode, no_broker.stderr) == (
        1,
        "strom: broker 42 is not in the cluster's metadata\n",
    )

    bad_state = strom("txn", "list", "--state", "Running", "-b", bootstrap)
    assert bad_state.returncode == 2 and "unknown transaction state 'Running'" in bad_state.stderr
    missing = strom("txn", "abort", "--topic", topic, "--partition", "0", "-b", bootstrap)
    assert missing.returncode == 2 and "--start-offset" in missing.stderr

    nobody = f"127.0.0.1:{free_port()}"
    for args in (("list",), ("describe", "--transactional-id", "x")):
        down = strom("txn", *args, "-b", nobody, "--timeout", "2")
        assert down.returncode == 3, down.stderr
        assert down.stderr == f"strom: cannot reach a broker at {nobody} (connection refused)\n"


def test_on_three_nodes_each_coordinator_and_leader_is_asked(
    strom_cluster: StromCluster, producers: list[Producer]
) -> None:
    """Transactional ids spread over the coordinators, and partitions over the leaders:
    list asks every broker, describe the id's coordinator, abort each partition's leader."""
    bootstrap = strom_cluster.bootstrap_servers
    topic = unique_topic("txn3")
    strom_cluster.create_topic(topic, partitions=3, replication_factor=3)
    leaders = {1: 2, 2: 3}  # at least one is not the broker the CLI bootstraps from
    for partition, node in leaders.items():
        strom_cluster.move_leader(topic, partition, node)
    ids = [f"spread-{n}-{uuid.uuid4().hex[:6]}" for n in range(6)]
    for txn_id in ids:
        producer = transactional(bootstrap, txn_id, producers)
        producer.begin_transaction()
        produce(producer, topic, 0, [txn_id.encode()])

    listed = strom("txn", "list", "--state", "Ongoing", "-b", bootstrap)
    assert listed.returncode == 0, listed.stderr
    coordinators = {
        r["TRANSACTIONAL ID"]: r["COORDINATOR"] for r in table(listed.stdout, "TRANSACTIONAL ID")
    }
    assert set(ids) <= set(coordinators)
    assert len({coordinators[i] for i in ids}) > 1, coordinators  # 6 ids, 4 partitions, 3 nodes
    for txn_id in ids[:3]:
        described = strom("txn", "describe", "--transactional-id", txn_id, "-b", bootstrap)
        assert described.returncode == 0, described.stderr
        assert fields(described.stdout)["Coordinator"].startswith(f"node {coordinators[txn_id]} ")

    hanging = transactional(bootstrap, f"hang-{uuid.uuid4().hex[:6]}", producers)
    hanging.begin_transaction()
    starts = {p: produce(hanging, topic, p, [b"lost"])[0] for p in (1, 2)}
    producers.remove(hanging)
    del hanging
    gc.collect()
    plain = Producer({"bootstrap.servers": bootstrap})
    for partition, start in starts.items():
        produce(plain, topic, partition, [b"after"])
        aborted = strom(
            "txn",
            "abort",
            "--topic",
            topic,
            "--partition",
            str(partition),
            "--start-offset",
            str(start),
            "-b",
            bootstrap,
        )
        assert aborted.returncode == 0, aborted.stderr
        assert f"(leader: broker {leaders[partition]})" in aborted.stdout
    for partition in starts:
        assert read_committed(bootstrap, topic, b"after", partition) == [b"after"]
