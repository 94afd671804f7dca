"""`strom group describe` and `strom group list` of a share group against a real broker
(the `strom_broker` fixture), with a confluent-kafka ShareConsumer (share_member.py, in a
child process) that has accepted some records."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from cli_runner import strom, table
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from share_members import ACCEPT, ShareMember, set_group_configs, story

from strom.testing import StromCluster

RECORDS = 5


@pytest.fixture
def started() -> Iterator[list[ShareMember]]:
    members: list[ShareMember] = []
    try:
        yield members
    finally:
        for member in members:
            member.kill()


def test_describe_shows_a_share_groups_member_and_start_offset(
    strom_broker: StromCluster, started: list[ShareMember]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", f"share-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    deadline = time.monotonic() + 40
    while {o for _, o, kind in member.snapshot()[1] if kind == ACCEPT} != set(range(RECORDS)):
        assert time.monotonic() < deadline, story(started)
        time.sleep(0.1)

    described = strom("group", "describe", group, "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    out = described.stdout
    assert f"Group: {group}   Type: share   State: Stable" in out, out
    [row] = table(out, "MEMBER")
    assert row["ASSIGNED"] == f"{topic}:0", out
    assert row["CLIENT ID"] != "-", out
    [partition] = table(out, "TOPIC")
    assert partition == {
        "TOPIC": topic,
        "PARTITION": "0",
        "START OFFSET": str(RECORDS),
        "LAG": "0",
    }, out

    listed = strom("group", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0, listed.stderr
    rows = {r["GROUP"]: r for r in table(listed.stdout, "GROUP")}
    assert rows[group]["TYPE"] == "share", listed.stdout
    assert rows[group]["MEMBERS"] == "1", listed.stdout
