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


# --- delete and reset-offsets -------------------------------------------------------------


def _topic_with_records(bootstrap: str, count: int, t0_ms: int | None = None) -> str:
    """A one-partition topic with `count` records v0, v1, ...; with `t0_ms`, record i's
    timestamp is t0_ms + i seconds."""
    topic = f"jobs-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    _produce(bootstrap, topic, range(count), t0_ms)
    return topic


def _produce(bootstrap: str, topic: str, values: range, t0_ms: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in values:
        at = {} if t0_ms is None else {"timestamp": t0_ms + i * 1000}
        producer.produce(topic, f"v{i}".encode(), partition=0, **at)
    assert producer.flush(30) == 0


def _accepted(member: ShareMember, offsets: set[int], members: list[ShareMember]) -> None:
    deadline = time.monotonic() + 40
    while {o for _, o, kind in member.snapshot()[1] if kind == ACCEPT} != offsets:
        assert time.monotonic() < deadline, story(members)
        time.sleep(0.1)


def _empty(bootstrap: str, group: str) -> None:
    """Wait until the share group has no members (a stopped member left it)."""
    deadline = time.monotonic() + 30
    while True:
        out = strom("group", "describe", group, "-b", bootstrap).stdout
        if "State: Empty" in out:
            return
        assert time.monotonic() < deadline, out
        time.sleep(0.2)


def _start_offsets(bootstrap: str, group: str) -> dict[str, tuple[str, str]]:
    """partition -> (start offset, lag), as `strom group describe` shows them."""
    described = strom("group", "describe", group, "-b", bootstrap)
    assert described.returncode == 0, described.stderr
    rows = table(described.stdout, "TOPIC")
    return {r["PARTITION"]: (r["START OFFSET"], r["LAG"]) for r in rows}


def test_delete_a_share_group_refused_while_it_has_a_member(
    strom_broker: StromCluster, started: list[ShareMember]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    b = ["-b", bootstrap]
    topic = _topic_with_records(bootstrap, 2)
    group = f"share-{uuid.uuid4().hex[:6]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, {0, 1}, started)

    busy = f"strom: share group '{group}' has 1 active member; stop it first\n"
    refused = strom("group", "delete", group, *b)
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", busy)
    for execute in ([], ["--execute"]):
        reset = strom("group", "reset-offsets", group, "-t", topic, "--to-earliest", *execute, *b)
        assert (reset.returncode, reset.stdout, reset.stderr) == (1, "", busy)
    assert _start_offsets(bootstrap, group) == {"0": ("2", "0")}

    member.stop()
    _empty(bootstrap, group)
    deleted = strom("group", "delete", group, *b)
    assert (deleted.returncode, deleted.stdout) == (0, f"deleted group {group}\n"), deleted.stderr
    listed = strom("group", "list", *b)
    assert listed.returncode == 0, listed.stderr
    assert group not in listed.stdout
    gone = strom("group", "describe", group, *b)
    assert (gone.returncode, gone.stderr) == (1, f"strom: group '{group}' does not exist\n")
    again = strom("group", "delete", group, *b)
    assert (again.returncode, again.stderr) == (1, f"strom: group '{group}' does not exist\n")

    # Deleted with its start offsets (also from the partition's leader, which held
    # them): a new group by that id starts where share.auto.offset.reset says.
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, {0, 1}, started)
    assert [(o, count) for _, o, _, count in member.snapshot()[0]] == [(0, 1), (1, 1)]


T0_MS = 1_700_000_000_000


def test_reset_a_share_groups_start_offsets(
    strom_broker: StromCluster, started: list[ShareMember]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    b = ["-b", bootstrap]
    topic = _topic_with_records(bootstrap, RECORDS, T0_MS)
    group = f"share-{uuid.uuid4().hex[:6]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, set(range(RECORDS)), started)
    member.stop()
    _empty(bootstrap, group)
    assert _start_offsets(bootstrap, group) == {"0": (str(RECORDS), "0")}

    def reset(*how: str) -> tuple[list[tuple[str, str]], str]:
        done = strom("group", "reset-offsets", group, *how, *b)
        assert done.returncode == 0, done.stderr
        rows = table(done.stdout, "TOPIC")
        return [(r["START OFFSET"], r["NEW START OFFSET"]) for r in rows], done.stderr

    # Without --execute, only the plan.
    plan, said = reset("-t", topic, "--to-earliest")
    assert plan == [(str(RECORDS), "0")]
    assert said == "dry run: nothing changed; add --execute to set these start offsets\n"
    plan, said = reset("--all-topics", "--to-datetime", "2023-11-14T22:13:22.500Z", "--dry-run")
    assert plan == [(str(RECORDS), "3")], said  # T0 + 2.5 s: the first record at or after is 3
    plan, said = reset("-t", f"{topic}:0", "--to-offset", "99")
    assert plan == [(str(RECORDS), str(RECORDS))]
    assert f"offset 99 is outside {topic}:0 (0 to {RECORDS}); using its log end" in said
    assert _start_offsets(bootstrap, group) == {"0": (str(RECORDS), "0")}
    shift = strom("group", "reset-offsets", group, "--all-topics", "--shift-by", "-1", *b)
    assert shift.returncode == 2
    assert shift.stderr.startswith("strom: --shift-by is not supported for share groups")

    # To the earliest: a new member gets every record again, once each.
    plan, said = reset("--all-topics", "--to-earliest", "--execute")
    assert plan == [(str(RECORDS), "0")]
    assert said == f"set the start offsets of 1 partition of share group {group}\n"
    assert _start_offsets(bootstrap, group) == {"0": ("0", str(RECORDS))}
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, set(range(RECORDS)), started)
    assert [(o, count) for _, o, _, count in member.snapshot()[0]] == [
        (o, 1) for o in range(RECORDS)
    ]
    member.stop()
    _empty(bootstrap, group)

    # To the latest: records written before are skipped, those after are delivered.
    _produce(bootstrap, topic, range(RECORDS, RECORDS + 3))
    plan, _ = reset("-t", topic, "--to-latest", "--execute")
    assert plan == [(str(RECORDS), str(RECORDS + 3))]
    assert _start_offsets(bootstrap, group) == {"0": (str(RECORDS + 3), "0")}
    _produce(bootstrap, topic, range(RECORDS + 3, RECORDS + 5))
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, {RECORDS + 3, RECORDS + 4}, started)
    assert [v for _, _, v, _ in member.snapshot()[0]] == [f"v{RECORDS + 3}", f"v{RECORDS + 4}"]


def test_reset_offsets_with_share_makes_a_new_share_group(
    strom_broker: StromCluster, started: list[ShareMember]
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    b = ["-b", bootstrap]
    topic = _topic_with_records(bootstrap, 3)
    group = f"share-{uuid.uuid4().hex[:6]}"
    how = ["reset-offsets", group, "-t", topic, "--to-offset", "1", "--share"]
    plan = strom("group", *how, *b)
    assert plan.returncode == 0, plan.stderr
    assert f"share group '{group}' does not exist yet; --execute creates it" in plan.stderr
    assert strom("group", "describe", group, *b).returncode == 1

    made = strom("group", *how, "--execute", *b)
    assert made.returncode == 0, made.stderr
    assert made.stderr.endswith(f"share group {group} (a new share group)\n")
    listed = {r["GROUP"]: r for r in table(strom("group", "list", *b).stdout, "GROUP")}
    assert (listed[group]["TYPE"], listed[group]["STATE"], listed[group]["MEMBERS"]) == (
        "share",
        "Empty",
        "0",
    )
    assert _start_offsets(bootstrap, group) == {"0": ("1", "2")}
    # The group's share.auto.offset.reset is latest (the default), but its start offset
    # was set: a member reads from offset 1.
    member = ShareMember(bootstrap, group, topic)
    started.append(member)
    _accepted(member, {1, 2}, started)
    assert [o for _, o, _, _ in member.snapshot()[0]] == [1, 2]

    # A consumer group is not made a share group.
    committed = strom(
        "group", "reset-offsets", "plain", "-t", topic, "--to-earliest", "--execute", *b
    )
    assert committed.returncode == 0, committed.stderr
    refused = strom("group", "reset-offsets", "plain", "-t", topic, "--to-earliest", "--share", *b)
    assert (refused.returncode, refused.stderr) == (
        1,
        "strom: group 'plain' is a classic group, not a share group\n",
    )
