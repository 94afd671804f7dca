"""Admin views of KIP-848 consumer groups: confluent-kafka's AdminClient lists a consumer
group with its type (with and without a type filter) and describes it with
ConsumerGroupDescribe (type CONSUMER, state, members with their assignments, the
assignor), side by side with a classic group, which it still describes with
DescribeGroups; `strom group list` and `describe` show both."""

from __future__ import annotations

import re

from broker import BrokerProcess
from cli_runner import strom, table
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import Member, balanced, group_story, wait_until

PARTITIONS = 4


def _topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(8):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def start_groups(bootstrap: str, members: list[Member]) -> None:
    """Two KIP-848 members in `new848` on topic `t848`; one classic member in `old` on
    `tclassic`; all of them own their partitions."""
    _topic(bootstrap, "t848")
    _topic(bootstrap, "tclassic")
    kip848 = [Member(bootstrap, "new848", "t848", **{"group.protocol": "consumer"}) for _ in "ab"]
    members.extend(kip848)
    classic = Member(bootstrap, "old", "tclassic")
    members.append(classic)
    wait_until(
        lambda: balanced(kip848, PARTITIONS) and balanced([classic], PARTITIONS),
        60,
        "both groups to own their partitions",
        lambda: group_story(bootstrap, "new848", kip848),
    )


def test_admin_lists_and_describes_both_types(
    kip848_broker: BrokerProcess, members: list[Member]
) -> None:
    bootstrap = kip848_broker.bootstrap
    start_groups(bootstrap, members)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    listed = admin.list_consumer_groups().result(10)
    types = {g.group_id: g.type for g in listed.valid}
    assert types == {"new848": ConsumerGroupType.CONSUMER, "old": ConsumerGroupType.CLASSIC}
    only = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    assert [g.group_id for g in only.valid] == ["new848"]
    only = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10)
    assert [g.group_id for g in only.valid] == ["old"]

    found = admin.describe_consumer_groups(["new848", "old"])
    new = found["new848"].result(10)
    assert new.type is ConsumerGroupType.CONSUMER
    assert new.state is ConsumerGroupState.STABLE
    assert new.partition_assignor == "uniform"
    assert len(new.members) == 2
    owned = sorted(
        (tp.topic, tp.partition) for m in new.members for tp in m.assignment.topic_partitions
    )
    assert owned == [("t848", p) for p in range(PARTITIONS)]
    for m in new.members:
        assert m.client_id and m.host
        assert m.target_assignment is not None
        assert sorted(tp.partition for tp in m.target_assignment.topic_partitions) == sorted(
            tp.partition for tp in m.assignment.topic_partitions
        )
    old = found["old"].result(10)
    assert old.type is ConsumerGroupType.CLASSIC
    assert old.state is ConsumerGroupState.STABLE
    assert len(old.members) == 1
    assert sorted(tp.partition for tp in old.members[0].assignment.topic_partitions) == list(
        range(PARTITIONS)
    )


def test_cli_lists_and_describes_both_types(
    kip848_broker: BrokerProcess, members: list[Member]
) -> None:
    bootstrap = kip848_broker.bootstrap
    start_groups(bootstrap, members)
    b = ("--bootstrap-server", bootstrap)
    # The members commit each record they read: 2 of each partition.
    wait_until(
        lambda: sum(len(m.snapshot()[1]) for m in members[:2]) == 8, 30, "8 records consumed"
    )

    listed = strom("group", "list", *b)
    assert listed.returncode == 0, listed.stderr
    rows = {row["GROUP"]: row for row in table(listed.stdout, "GROUP")}
    assert rows["new848"]["TYPE"] == "consumer"
    assert rows["new848"]["STATE"] == "Stable"
    assert rows["new848"]["MEMBERS"] == "2"
    assert rows["old"]["TYPE"] == "classic"

    described = strom("group", "describe", "new848", "old", *b)
    assert described.returncode == 0, described.stderr
    out = described.stdout
    header = next(line for line in out.splitlines() if line.startswith("Group: new848"))
    assert re.search(r"Type: consumer   State: Stable   Group epoch: \d+", header), header
    assert "Assignor: uniform" in header
    kip848_members = table(out, "MEMBER")
    assert len(kip848_members) == 2
    assigned: list[str] = []
    for row in kip848_members:
        assert int(row["EPOCH"]) > 0
        assert row["CLIENT ID"] != "-" and row["HOST"] != "-"
        assert row["ASSIGNED"] == row["TARGET"]
        assigned += row["ASSIGNED"].removeprefix("t848:").split(",")
    assert sorted(assigned) == [str(p) for p in range(PARTITIONS)]
    offsets = table(out, "TOPIC")
    assert [(r["TOPIC"], r["PARTITION"], r["COMMITTED"], r["LAG"]) for r in offsets] == [
        ("t848", str(p), "2", "0") for p in range(PARTITIONS)
    ]
    assert "Total lag: 0" in out
    classic = out[out.index("Group: old") :]
    assert "Type:" not in classic.splitlines()[0]
    assert table(classic, "MEMBER")[0]["PARTITIONS"] == "tclassic:0,1,2,3"
