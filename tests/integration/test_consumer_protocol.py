"""KIP-848 consumer groups (`group.protocol=consumer`) with real confluent-kafka consumers
against a `strom serve` process: the broker assigns, members join one after another,
leave, and die (SIGKILL); every partition is consumed exactly once and never owned by two
members at once (as their on_assign/on_revoke callbacks report)."""

from __future__ import annotations

import itertools
import time

from broker import BrokerProcess
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import KIP848_SESSION_MS, Member, group_story, wait_until

PARTITIONS = 6
KIP848 = {"group.protocol": "consumer"}


def _setup(bootstrap: str, topic: str, count: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(10)
    values = [f"v{i}" for i in range(count)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def _ownership(member: Member, end: float) -> dict[int, list[tuple[float, float]]]:
    """When the member owned each partition, by its on_assign/on_revoke callbacks (the
    consumer protocol reports only what is added and what is taken away)."""
    since: dict[int, float] = {}
    spans: dict[int, list[tuple[float, float]]] = {}
    for event in member.snapshot()[2]:
        if "assigned" in event:
            for p in event["assigned"]:
                since.setdefault(p, event["at"])
        elif "revoked" in event:
            for p in event["revoked"]:
                spans.setdefault(p, []).append((since.pop(p), event["at"]))
    for p, start in since.items():
        spans.setdefault(p, []).append((start, end))
    return spans


def _never_shared(members: list[Member], ends: list[float]) -> None:
    """No partition was ever owned by two members at once (callback times are on one
    clock: the machine's monotonic one)."""
    spans = [_ownership(m, end) for m, end in zip(members, ends, strict=True)]
    for p in range(PARTITIONS):
        owned = sorted((s, e, i) for i, each in enumerate(spans) for s, e in each.get(p, []))
        for (s1, e1, i1), (s2, e2, i2) in itertools.pairwise(owned):
            assert s2 >= e1, (
                f"partition {p}: member {i1} {s1:.3f}-{e1:.3f}, member {i2} {s2:.3f}-{e2:.3f}"
            )


def _consumed(members: list[Member]) -> list[str]:
    return [value for m in members for _, _, value in m.snapshot()[1]]


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    found = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


def test_members_join_leave_and_die(kip848_broker: BrokerProcess, members: list[Member]) -> None:
    bootstrap = kip848_broker.bootstrap
    values = _setup(bootstrap, "kip848", 60)

    def story() -> str:
        return group_story(bootstrap, "g848", members)

    def owners_ok() -> bool:
        owned = [m.snapshot()[0] for m in members if m.alive]
        union: set[int] = set()
        for each in owned:
            if union & each:
                raise AssertionError(f"partitions owned twice: {owned}\n{story()}")
            union |= each
        return union == set(range(PARTITIONS)) and min(len(o) for o in owned) >= 1

    for _ in range(3):  # one after another: each join moves partitions to the new one
        members.append(Member(bootstrap, "g848", "kip848", **KIP848))
        wait_until(owners_ok, 60, "every partition owned once, by every member", story)
    wait_until(lambda: len(set(_consumed(members))) == len(values), 60, "all records", story)
    assert sorted(_consumed(members)) == sorted(values), "a record consumed twice"

    members[0].stop()  # a clean close leaves the group: its partitions move
    alive = members[1:]
    wait_until(
        lambda: (
            set().union(*(m.snapshot()[0] for m in alive)) == set(range(PARTITIONS)) and owners_ok()
        ),
        60,
        "the leaver's partitions with the others",
        story,
    )
    killed_at = time.monotonic()
    members[1].kill()  # SIGKILL: its partitions move after the session timeout
    wait_until(
        lambda: members[2].snapshot()[0] == set(range(PARTITIONS)),
        KIP848_SESSION_MS / 1000 + 30,
        "the killed member's partitions with the last one",
        story,
    )
    now = time.monotonic()
    _never_shared(members, [now, killed_at, now])
    assert any("revoked" in e for e in members[0].snapshot()[2])  # it gave partitions up
    committed = _committed(bootstrap, "g848", "kip848")
    assert committed == {p: 10 for p in range(PARTITIONS)}, committed


def test_offsets_with_a_stale_member_epoch_are_refused(kip848_broker: BrokerProcess) -> None:
    bootstrap = kip848_broker.bootstrap
    _setup(bootstrap, "epochs", 6)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ge",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **KIP848,
        }
    )
    try:
        consumer.subscribe(["epochs"])
        got = None
        for _ in range(200):
            got = consumer.poll(0.2)
            if got is not None and not got.error():
                break
        assert got is not None and not got.error()
        consumer.commit(got, asynchronous=False)
        committed = consumer.committed([TopicPartition("epochs", got.partition())], timeout=10)
        assert committed[0].offset == got.offset() + 1
    finally:
        consumer.close()


def test_a_static_member_back_within_its_session_takes_its_partitions_again(
    kip848_broker: BrokerProcess, members: list[Member]
) -> None:
    """A static member that closes leaves for a while (epoch -2): its partitions wait for
    it, nobody else gets them, and a new process with its instance id takes them back."""
    bootstrap = kip848_broker.bootstrap
    _setup(bootstrap, "static848", 0)

    def story() -> str:
        return group_story(bootstrap, "s848", members)

    a = Member(bootstrap, "s848", "static848", **{"group.instance.id": "pod-a", **KIP848})
    members.append(a)
    wait_until(lambda: a.snapshot()[0] == set(range(PARTITIONS)), 60, "a owns all", story)
    b = Member(bootstrap, "s848", "static848", **{"group.instance.id": "pod-b", **KIP848})
    members.append(b)
    wait_until(
        lambda: len(b.snapshot()[0]) == PARTITIONS // 2 and len(a.snapshot()[0]) == 3,
        60,
        "a and b share",
        story,
    )
    mine = a.snapshot()[0]
    a.stop()
    back = Member(bootstrap, "s848", "static848", **{"group.instance.id": "pod-a", **KIP848})
    members.append(back)
    wait_until(lambda: back.snapshot()[0] == mine, 60, "pod-a's partitions back", story)
    assert len(b.snapshot()[0]) == 3
    assert not any("revoked" in e for e in b.snapshot()[2])  # b was never asked to move


def test_the_group_survives_a_restart_of_the_broker(
    kip848_broker: BrokerProcess, members: list[Member]
) -> None:
    """The group's records are replayed at start: the members go on with their epochs and
    partitions, and every record is consumed once across the restart."""
    bootstrap = kip848_broker.bootstrap
    values = _setup(bootstrap, "restart848", 30)

    def story() -> str:
        return group_story(bootstrap, "r848", members)

    # A member must heartbeat within its session (4 s) of the restarted broker's load:
    # librdkafka's reconnect backoff grows to 10 s by default while the broker is down,
    # which on a loaded machine can outlast the session and fence a healthy member.
    reconnect = {"reconnect.backoff.ms": "50", "reconnect.backoff.max.ms": "500"}
    for _ in range(2):
        members.append(Member(bootstrap, "r848", "restart848", **KIP848, **reconnect))
    wait_until(lambda: len(set(_consumed(members))) == len(values), 60, "the records", story)
    # The first member may read every record before the second has its share: the group
    # is settled once each owns three partitions (their callbacks say so).
    wait_until(
        lambda: sorted(len(m.snapshot()[0]) for m in members) == [3, 3],
        60,
        "the partitions shared three and three",
        story,
    )
    before = [m.snapshot()[0] for m in members]

    def moves() -> int:
        return sum(1 for m in members for e in m.snapshot()[2] if "revoked" in e)

    moved = moves()
    kip848_broker.stop()
    kip848_broker.start()
    more = [f"w{i}" for i in range(30)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(more):
        producer.produce("restart848", value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    everything = values + more
    wait_until(lambda: len(set(_consumed(members))) == len(everything), 60, "all records", story)
    assert sorted(_consumed(members)) == sorted(everything), "a record consumed twice"
    assert [m.snapshot()[0] for m in members] == before
    assert moves() == moved  # no member was fenced or had to give a partition up
    assert _committed(bootstrap, "r848", "restart848") == {p: 10 for p in range(PARTITIONS)}


def test_a_regex_subscription_follows_the_topics_that_match(kip848_broker: BrokerProcess) -> None:
    """librdkafka sends a `^` subscription as KIP-848's subscribed_topic_regex (v1), which
    the broker evaluates (RE2, whole names): matching topics are assigned, others not, and
    a matching topic created later joins the assignment."""
    bootstrap = kip848_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, 2, 1) for name in ("regex-a", "regex-b", "other-c")]
    ).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for name in ("regex-a", "regex-b", "other-c"):
        producer.produce(name, name.encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **KIP848,
            "bootstrap.servers": bootstrap,
            "group.id": "regex-group",
            "auto.offset.reset": "earliest",
        }
    )
    seen: set[str] = set()

    def received(*wanted: str) -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.add(message.topic())
        return set(wanted) <= seen

    try:
        consumer.subscribe(["^regex-.*"])
        wait_until(lambda: received("regex-a", "regex-b"), 30, "records of regex-a and regex-b")
        for future in admin.create_topics([NewTopic("regex-new", 2, 1)]).values():
            future.result(10)
        producer.produce("regex-new", b"late", partition=1)
        assert producer.flush(30) == 0
        wait_until(lambda: received("regex-new"), 30, "the record of regex-new, created later")
        assignment = {tp.topic for tp in consumer.assignment()}
        assert assignment == {"regex-a", "regex-b", "regex-new"}
        assert "other-c" not in seen
    finally:
        consumer.close()
