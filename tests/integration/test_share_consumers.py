"""Share groups (KIP-932 queues) with confluent-kafka's ShareConsumer in child processes
against real strom brokers: members share one partition, each record is delivered to one
member at a time and, once its acceptance is confirmed, never again; released records
and records whose member died come back with a higher delivery count; the delivery limit
and rejections send records to the group's dead-letter topic; a broker killed with
SIGKILL, and a leader change in a three-node cluster, keep every confirmed
acknowledgement."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess
from cluster import running_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import wait_until
from share_members import ACCEPT, ShareMember, assigned_members, set_group_configs, story

LOCK_MS = 2000
SHARE_SETTINGS = [
    f"group.share.record.lock.duration.ms={LOCK_MS}",
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.session.timeout.ms=6000",
    "group.share.min.session.timeout.ms=1000",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.heartbeat.interval.ms=100",
]


def _settings() -> list[str]:
    out: list[str] = []
    for setting in SHARE_SETTINGS:
        out += ["--set", setting]
    return out


@pytest.fixture
def share_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", extra=_settings())
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def members() -> Iterator[list[ShareMember]]:
    started: list[ShareMember] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()


def _topic(bootstrap: str, name: str, replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, replication)]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(30) == 0


def _group(bootstrap: str, **configs: str) -> str:
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", **configs})
    return group


def _accepted(members: list[ShareMember]) -> Counter[int]:
    return Counter(o for m in members for _, o, kind in m.snapshot()[1] if kind == ACCEPT)


def _never_after_acceptance(members: list[ShareMember]) -> None:
    """No member got a record after any member's acceptance of it was confirmed (the
    members report in their own order; a record accepted by one and later got by another
    is caught by comparing with the first confirmation, which every later delivery
    follows in time)."""
    accepted_by: dict[int, int] = {}
    for i, member in enumerate(members):
        for event, _, offset, kind in list(member.timeline):
            if event == "acked" and kind == ACCEPT:
                accepted_by.setdefault(offset, i)
    for i, member in enumerate(members):
        seen_acceptance: set[int] = set()
        for event, _, offset, kind in list(member.timeline):
            if event == "acked" and kind == ACCEPT:
                seen_acceptance.add(offset)
            elif event == "got":
                assert offset not in seen_acceptance, f"member {i} got {offset} after accepting it"


def test_three_share_consumers_read_one_partition_once(
    share_broker: BrokerProcess, members: list[ShareMember]
) -> None:
    bootstrap = share_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    _topic(bootstrap, topic)
    group = _group(bootstrap)
    members.extend(ShareMember(bootstrap, group, topic) for _ in range(3))
    wait_until(lambda: assigned_members(bootstrap, group) == 3, 30, "three assigned members")
    # A fetch takes at most 500 records (librdkafka's default), and a member waiting in
    # a long poll is woken by new records: bursts of 1,500 reach every waiting member.
    # (Trickles of fewer records than one fetch takes can all go to one member: share
    # groups promise each record to one member, not an even spread.)
    values: list[str] = []
    while len(values) < 15_000 and not all(m.snapshot()[0] for m in members):
        burst = [f"v{i}" for i in range(len(values), len(values) + 1500)]
        _produce(bootstrap, topic, burst)
        values += burst
        total = len(values)
        wait_until(
            lambda total=total: len(_accepted(members)) == total,
            60,
            f"{len(values)} records accepted",
            lambda: story(members),
        )
    assert set(_accepted(members)) == set(range(len(values)))
    accepted = _accepted(members)
    assert max(accepted.values()) == 1, "a record was accepted twice"
    got = Counter(o for m in members for _, o, _, _ in m.snapshot()[0])
    assert set(got) == set(range(len(values)))
    assert all(len(m.snapshot()[0]) > 0 for m in members), story(members)
    _never_after_acceptance(members)
    for member in members:
        member.stop()
    # A new member of the group gets only what was never accepted.
    late = ShareMember(bootstrap, group, topic)
    members.append(late)
    _produce(bootstrap, topic, ["late-1", "late-2"])
    wait_until(lambda: len(late.snapshot()[1]) >= 2, 60, "the late records", lambda: story([late]))
    assert sorted(v for _, _, v, _ in late.snapshot()[0]) == ["late-1", "late-2"]


def test_released_and_abandoned_records_come_back_counted(
    share_broker: BrokerProcess, members: list[ShareMember]
) -> None:
    bootstrap = share_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    _topic(bootstrap, topic)
    group = _group(bootstrap, **{"share.delivery.count.limit": "3"})
    holder = ShareMember(bootstrap, group, topic, hold_s=120)
    members.append(holder)
    _produce(bootstrap, topic, [f"v{i}" for i in range(20)])
    wait_until(lambda: len(holder.snapshot()[0]) > 0, 60, "the holder's records")
    held = {o for _, o, _, _ in holder.snapshot()[0]}
    holder.kill()  # SIGKILL while it holds its records: its connections close, they return
    releaser = ShareMember(bootstrap, group, topic, release=["v3"])
    members.append(releaser)
    wait_until(
        lambda: {o for _, o, k in releaser.snapshot()[1] if k == ACCEPT} == set(range(20)) - {3},
        60,
        "every record but v3 accepted",
        lambda: story(members),
    )
    wait_until(
        lambda: sum(1 for _, o, _, _ in releaser.snapshot()[0] if o == 3) + (3 in held) >= 3,
        30,
        "v3 delivered up to the limit",
        lambda: story(members),
    )
    got = releaser.snapshot()[0]
    for _, offset, _, count in got:
        if offset in held:
            assert count >= 2, f"offset {offset} came back with delivery count {count}"
    counts_of_3 = [count for _, o, _, count in got if o == 3]
    assert counts_of_3 == sorted(counts_of_3) and len(set(counts_of_3)) == len(counts_of_3)
    assert max(counts_of_3) == 3, "v3 is delivered three times, the limit, then archived"
    # Archived: it never comes again.
    _produce(bootstrap, topic, ["after"])
    wait_until(lambda: any(v == "after" for _, _, v, _ in releaser.snapshot()[0]), 30, "after")
    assert [c for _, o, _, c in releaser.snapshot()[0] if o == 3] == counts_of_3


def test_limit_and_rejects_go_to_the_dead_letter_topic(
    share_broker: BrokerProcess, members: list[ShareMember]
) -> None:
    bootstrap = share_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    dlq = f"dlq.{topic}"
    _topic(bootstrap, topic)
    _topic(bootstrap, dlq)
    group = _group(
        bootstrap,
        **{
            "share.delivery.count.limit": "2",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": "true",  # else no key and value
        },
    )
    member = ShareMember(bootstrap, group, topic, release=["poison"], reject=["bad"])
    members.append(member)
    _produce(bootstrap, topic, ["ok-0", "poison", "ok-2", "bad", "ok-4"])
    wait_until(
        lambda: {o for _, o, k in member.snapshot()[1] if k == ACCEPT} == {0, 2, 4},
        60,
        "the good records accepted",
        lambda: story(members),
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-reader-{group}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([dlq])
    letters: list[tuple[bytes, dict[str, bytes]]] = []
    try:
        wait_until(lambda: _read_some(consumer, letters) >= 2, 60, "two dead letters")
    finally:
        consumer.close()
    by_value = {value: headers for value, headers in letters}
    assert set(by_value) == {b"poison", b"bad"}
    poison, bad = by_value[b"poison"], by_value[b"bad"]
    assert poison["__dlq.errors.topic"] == topic.encode()
    assert poison["__dlq.errors.partition"] == b"0"
    assert poison["__dlq.errors.offset"] == b"1"
    assert poison["__dlq.errors.group"] == group.encode()
    assert poison["__dlq.errors.delivery.count"] == b"2"
    assert b"delivery count" in poison["__dlq.errors.message"]
    assert bad["__dlq.errors.offset"] == b"3"
    assert bad["__dlq.errors.delivery.count"] == b"1"
    assert b"rejected" in bad["__dlq.errors.message"]
    assert [c for _, o, _, c in member.snapshot()[0] if o == 1] == [1, 2]


def _read_some(consumer: Consumer, into: list[tuple[bytes, dict[str, bytes]]]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append((message.value(), dict(message.headers() or [])))
    return len(into)


def test_accepted_records_survive_a_broker_kill(
    share_broker: BrokerProcess, members: list[ShareMember]
) -> None:
    bootstrap = share_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    _topic(bootstrap, topic)
    group = _group(bootstrap)
    members.extend(ShareMember(bootstrap, group, topic) for _ in range(2))
    _produce(bootstrap, topic, [f"v{i}" for i in range(400)])
    wait_until(lambda: sum(_accepted(members).values()) >= 100, 60, "100 accepted")
    share_broker.kill()  # SIGKILL in the middle of the work
    share_broker.start()
    _produce(bootstrap, topic, [f"w{i}" for i in range(200)])  # and more work after it
    wait_until(
        lambda: set(_accepted(members)) == set(range(600)),
        90,
        "every record accepted after the restart",
        lambda: story(members),
    )
    assert max(_accepted(members).values()) == 1, "a record was accepted twice"
    _never_after_acceptance(members)


def test_a_leader_change_keeps_accepted_records(tmp_path: Path, members: list[ShareMember]) -> None:
    with running_cluster(tmp_path, nodes=3, settings=SHARE_SETTINGS) as cluster:
        bootstrap = cluster.bootstrap
        topic = f"queue-{uuid.uuid4().hex[:6]}"
        _topic(bootstrap, topic, replication=3)
        group = _group(bootstrap)
        members.extend(ShareMember(bootstrap, group, topic) for _ in range(2))
        _produce(bootstrap, topic, [f"v{i}" for i in range(300)])
        wait_until(lambda: sum(_accepted(members).values()) >= 100, 60, "100 accepted")
        leader = _leader(bootstrap, topic)
        cluster.kill(leader)  # SIGKILL: the partition's leadership moves
        survivor = next(n for n in cluster.node_ids if n != leader)
        wait_until(
            lambda: _leader(cluster.address(survivor), topic) not in (leader, -1),
            30,
            "a new leader",
        )
        _produce(cluster.address(survivor), topic, [f"w{i}" for i in range(300)])
        wait_until(
            lambda: set(_accepted(members)) == set(range(600)),
            120,
            "every record accepted after the leader change",
            lambda: story(members),
        )
        assert max(_accepted(members).values()) == 1, "a record was accepted twice"
        _never_after_acceptance(members)


def _leader(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[0].leader)
