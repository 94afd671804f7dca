"""`strom group` against a real broker (the `strom_broker` fixture), with real
confluent-kafka consumers in the group."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from broker import free_port
from cli_runner import strom, table
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from group_members import wait_until

from strom.cli.group_model import ACTIVE_MEMBER_ERRORS
from strom.testing import StromCluster

PARTITIONS = 3
PER_PARTITION = 10
# Every record's timestamp: T0 + its offset in seconds, so a time names an offset.
T0_MS = 1_700_000_000_000


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    started: list[Consumer] = []
    try:
        yield started
    finally:
        for consumer in started:
            consumer.close()


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(10)


def produce_timed(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for partition in range(PARTITIONS):
        for offset in range(PER_PARTITION):
            value = f"{partition}-{offset}".encode()
            producer.produce(topic, value, partition=partition, timestamp=T0_MS + offset * 1000)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def position(message: Message) -> tuple[int, int]:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    return partition, offset


def committed(admin: AdminClient, group: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def group_state(admin: AdminClient, group: str) -> str:
    return str(admin.describe_consumer_groups([group])[group].result(10).state.name)


def test_describe_delete_and_reset_a_live_then_empty_group(
    strom_broker: StromCluster, consumers: list[Consumer]
) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    create_topic(admin, "orders", PARTITIONS)
    produce_timed(strom_broker.bootstrap_servers, "orders")

    # Member A reads 25 of the 30 records and commits: at least 5 from each partition.
    a = consumer(strom_broker.bootstrap_servers, "billing", "billing-a")
    consumers.append(a)
    a.subscribe(["orders"])
    read_to: dict[int, int] = {}  # partition -> the offset after the last record read
    read = 0

    def read_25() -> bool:
        nonlocal read
        for message in a.consume(25 - read, 0.2):
            if message.error() is None:
                partition, offset = position(message)
                read_to[partition] = offset + 1
                read += 1
        return read == 25

    wait_until(read_25, 30, "25 records read")
    a.commit(asynchronous=False)
    assert sorted(read_to) == list(range(PARTITIONS))
    assert sum(read_to.values()) == 25

    # Member B joins; both poll until the partitions are shared between them.
    b_member = consumer(strom_broker.bootstrap_servers, "billing", "billing-b")
    consumers.append(b_member)
    b_member.subscribe(["orders"])

    def shared() -> bool:
        a.poll(0.05)
        b_member.poll(0.05)
        owned = [len(c.assignment()) for c in (a, b_member)]
        return min(owned) > 0 and sum(owned) == PARTITIONS

    wait_until(shared, 30, "two members sharing the partitions")
    owner = {tp.partition: c.memberid() for c in (a, b_member) for tp in c.assignment()}

    listed = strom("group", "list", *b)
    assert listed.returncode == 0, listed.stderr
    assert {
        "GROUP": "billing",
        "TYPE": "classic",
        "STATE": "Stable",
        "PROTOCOL TYPE": "consumer",
        "MEMBERS": "2",
    } in (table(listed.stdout, "GROUP"))

    described = strom("group", "describe", "billing", *b)
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith("Group: billing   State: Stable   Assignor: range   ")
    members = {row["MEMBER"]: row for row in table(described.stdout, "MEMBER")}
    for client_id, c in (("billing-a", a), ("billing-b", b_member)):
        row = members[c.memberid()]
        assert (row["CLIENT ID"], row["HOST"], row["INSTANCE ID"]) == (
            client_id,
            "/127.0.0.1",
            "-",
        )
        mine = sorted(tp.partition for tp in c.assignment())
        assert row["PARTITIONS"] == "orders:" + ",".join(map(str, mine))
    assert table(described.stdout, "TOPIC") == [
        {
            "TOPIC": "orders",
            "PARTITION": str(p),
            "COMMITTED": str(read_to[p]),
            "LOG END": str(PER_PARTITION),
            "LAG": str(PER_PARTITION - read_to[p]),
            "MEMBER": owner[p],
        }
        for p in range(PARTITIONS)
    ]
    assert "Total lag: 5\n" in described.stdout

    active = "strom: group 'billing' has active members; stop them first\n"
    deleted = strom("group", "delete", "billing", *b)
    assert (deleted.returncode, deleted.stderr) == (1, active)
    reset = strom(
        "group", "reset-offsets", "billing", "-t", "orders", "--to-earliest", "--execute", *b
    )
    assert (reset.returncode, reset.stderr) == (1, active)
    # If a member joins between the CLI's check and its commit, the broker refuses the
    # commit with an error the CLI turns into the same message (strom: ILLEGAL_GENERATION,
    # Kafka: UNKNOWN_MEMBER_ID).
    race = ConsumerGroupTopicPartitions("billing", [TopicPartition("orders", 0, 0)])
    result = admin.alter_consumer_group_offsets([race])["billing"].result(10)
    assert result.topic_partitions[0].error.name() in ACTIVE_MEMBER_ERRORS
    assert committed(admin, "billing") == read_to

    for c in consumers:
        c.close()  # LeaveGroup
    consumers.clear()
    wait_until(lambda: group_state(admin, "billing") == "EMPTY", 15, "the group to be empty")

    described = strom("group", "describe", "billing", *b)
    assert described.returncode == 0, described.stderr
    assert "State: Empty" in described.stdout and "No active members." in described.stdout
    assert [row["MEMBER"] for row in table(described.stdout, "TOPIC")] == ["-"] * PARTITIONS

    def reset_to(*how: str) -> subprocess.CompletedProcess[str]:
        done = strom("group", "reset-offsets", "billing", *how, *b)
        assert done.returncode == 0, done.stderr
        return done

    dry = reset_to("--topic", "orders", "--to-latest")
    assert [(r["CURRENT OFFSET"], r["NEW OFFSET"]) for r in table(dry.stdout, "TOPIC")] == [
        (str(read_to[p]), str(PER_PARTITION)) for p in range(PARTITIONS)
    ]
    assert "dry run: nothing changed" in dry.stderr
    assert committed(admin, "billing") == read_to

    reset_to("--topic", "orders:0", "--to-earliest", "--execute")
    assert committed(admin, "billing") == read_to | {0: 0}
    reset_to("--topic", "orders", "--to-offset", "7", "--execute")
    assert committed(admin, "billing") == {0: 7, 1: 7, 2: 7}
    reset_to("--all-topics", "--shift-by", "-2", "--execute")
    assert committed(admin, "billing") == {0: 5, 1: 5, 2: 5}
    clamped = reset_to("--topic", "orders:1,2", "--to-offset", "50", "--execute")
    assert "offset 50 is outside orders:1 (0 to 10); using its log end, 10" in clamped.stderr
    assert committed(admin, "billing") == {0: 5, 1: 10, 2: 10}

    at = datetime.fromtimestamp((T0_MS + 3500) / 1000, UTC).isoformat()  # between 3 and 4
    reset_to("--topic", "orders", "--to-datetime", at, "--execute")
    assert committed(admin, "billing") == {0: 4, 1: 4, 2: 4}

    # A consumer joining the group starts where the reset put it.
    c = consumer(strom_broker.bootstrap_servers, "billing", "billing-c")
    consumers.append(c)
    c.subscribe(["orders"])
    first: dict[int, int] = {}

    def read_every_partition() -> bool:
        message = c.poll(0.1)
        if message is not None and message.error() is None:
            first.setdefault(*position(message))
        return len(first) == PARTITIONS

    wait_until(read_every_partition, 30, "a record from every partition")
    assert first == {0: 4, 1: 4, 2: 4}
    c.close()
    consumers.clear()
    wait_until(lambda: group_state(admin, "billing") == "EMPTY", 15, "the group to be empty")

    deleted = strom("group", "delete", "billing", *b)
    assert (deleted.returncode, deleted.stdout) == (0, "deleted group billing\n"), deleted.stderr
    assert "billing" not in strom("group", "list", *b).stdout
    gone = strom("group", "describe", "billing", *b)
    assert (gone.returncode, gone.stderr) == (1, "strom: group 'billing' does not exist\n")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["describe", "nosuch"], 1, "group 'nosuch' does not exist"),
        (["delete", "nosuch"], 1, "group 'nosuch' does not exist"),
        (
            ["reset-offsets", "nosuch", "-t", "missing", "--to-earliest"],
            1,
            "topic 'missing' does not exist",
        ),
        (
            ["reset-offsets", "nosuch", "-t", "few:5", "--to-earliest"],
            2,
            "topic 'few' has no partition 5 (it has 2)",
        ),
        (
            ["reset-offsets", "nosuch", "-t", "few", "--shift-by", "1"],
            1,
            "--shift-by needs a committed offset to shift, and there is none for few:0,1; "
            "choose those partitions' offsets with another --to-* option",
        ),
        (
            ["reset-offsets", "nosuch", "--all-topics", "--to-latest"],
            1,
            "group 'nosuch' has no committed offsets; name the topics with --topic",
        ),
        (
            ["reset-offsets", "nosuch", "-t", "few", "--to-datetime", "next tuesday"],
            2,
            "--to-datetime expects an ISO 8601 date and time such as 2024-05-01T12:00:00Z, "
            "2024-05-01T14:00+02:00 or 2024-05-01; got 'next tuesday'",
        ),
    ],
)
def test_wrong_input_gets_a_clear_message(
    strom_broker: StromCluster, args: list[str], code: int, message: str
) -> None:
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    create_topic(admin, "few", 2)
    result = strom("group", *args, "-b", strom_broker.bootstrap_servers)
    assert (result.returncode, result.stdout, result.stderr) == (code, "", f"strom: {message}\n")


def test_reset_offsets_of_a_new_group_creates_it(strom_broker: StromCluster) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    create_topic(admin, "fresh-topic", 2)
    plan = strom("group", "reset-offsets", "fresh", "-t", "fresh-topic", "--to-earliest", *b)
    assert plan.returncode == 0, plan.stderr
    assert "group 'fresh' does not exist yet; --execute creates it" in plan.stderr
    assert strom("group", "describe", "fresh", *b).returncode == 1

    made = strom(
        "group", "reset-offsets", "fresh", "-t", "fresh-topic:1", "--to-latest", "--execute", *b
    )
    assert made.returncode == 0, made.stderr
    listed = table(strom("group", "list", *b).stdout, "GROUP")
    assert {
        "GROUP": "fresh",
        "TYPE": "classic",
        "STATE": "Empty",
        "PROTOCOL TYPE": "-",
        "MEMBERS": "0",
    } in listed
    described = strom("group", "describe", "fresh", *b)
    assert table(described.stdout, "TOPIC") == [
        {
            "TOPIC": "fresh-topic",
            "PARTITION": "1",
            "COMMITTED": "0",
            "LOG END": "0",
            "LAG": "0",
            "MEMBER": "-",
        }
    ]
    assert strom("group", "delete", "fresh", *b).returncode == 0


def test_unreachable_broker_exits_3() -> None:
    address = f"127.0.0.1:{free_port()}"
    commands = [
        ["list"],
        ["describe", "g"],
        ["delete", "g"],
        ["reset-offsets", "g", "-t", "t", "--to-earliest"],
    ]
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "strom", "group", *args, "-b", address, "--timeout", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    for args, process in zip(commands, running, strict=True):
        _, stderr = process.communicate(timeout=60)
        assert (process.returncode, stderr) == (
            3,
            f"strom: cannot reach a broker at {address} (connection refused)\n",
        ), args
