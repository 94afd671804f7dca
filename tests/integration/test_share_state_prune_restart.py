"""`__share_group_state` pruned under a real share group, then the broker killed with
SIGKILL: the share coordinator loads the share-partition's state from the pruned log and
no accepted record comes back.

One `strom serve` process with one `__share_group_state` partition, a snapshot every 5
updates and a pruning every 200 ms. A first share consumer (confluent-kafka's
ShareConsumer in a child process) takes the first record and holds it, so the
share-partition's start offset stays at 0 and every acceptance after it lives in the
state's batches (in the snapshots the pruning keeps). Two more consumers accept every
other record, produced in small bursts so that their acknowledgements write the state
many times. The test waits until the partition's log start (ListOffsets earliest) rises
above 0, kills the broker, starts it again on the same data and checks that the
coordinator loaded the state from the pruned start and that every record, old and new,
is accepted once (the held one too, once its acquisition died with the broker).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import wait_until
from share_members import ACCEPT, ShareMember, set_group_configs, story

from strom.share.placement import SHARE_STATE_TOPIC

SETTINGS = [
    "group.share.record.lock.duration.ms=60000",  # the held record stays held
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.session.timeout.ms=6000",
    "group.share.min.session.timeout.ms=1000",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.heartbeat.interval.ms=100",
    "share.coordinator.state.topic.num.partitions=1",
    "share.coordinator.snapshot.update.records.per.snapshot=5",
    "share.coordinator.state.topic.prune.interval.ms=200",
]
BURSTS, TAIL_BURSTS, BURST = 20, 3, 10


@pytest.fixture
def pruning_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    extra = [part for setting in SETTINGS for part in ("--set", setting)]
    broker = BrokerProcess(tmp_path / "data", extra=extra)
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


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(30) == 0


def _accepted(members: list[ShareMember]) -> Counter[int]:
    return Counter(o for m in members for _, o, kind in m.snapshot()[1] if kind == ACCEPT)


def _bursts(bootstrap: str, topic: str, members: list[ShareMember], bursts: range) -> None:
    """Each burst of BURST records accepted before the next: a state write (or more)
    each."""
    for burst in bursts:
        first = 1 + burst * BURST
        _produce(bootstrap, topic, [f"v{i}" for i in range(first, first + BURST)])
        wait_until(
            lambda total=(burst + 1) * BURST: len(_accepted(members)) == total,
            60,
            f"{(burst + 1) * BURST} records accepted",
            lambda: story(members),
        )


def _state_log_start(bootstrap: str) -> int:
    """The log start of `__share_group_state`-0 (ListOffsets, earliest); -1 if unknown."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "prune-watcher"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, 0), timeout=5)
    except Exception:  # not created yet, or the broker restarting
        return -1
    finally:
        consumer.close()
    return int(low)


def test_a_pruned_state_topic_keeps_accepted_records_across_a_kill(
    pruning_broker: BrokerProcess, members: list[ShareMember]
) -> None:
    bootstrap = pruning_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    holder = ShareMember(bootstrap, group, topic, hold_s=600)
    members.append(holder)
    _produce(bootstrap, topic, ["held"])
    wait_until(
        lambda: len(holder.snapshot()[0]) == 1, 60, "the held record", lambda: story(members)
    )
    members.extend(ShareMember(bootstrap, group, topic) for _ in range(2))
    _bursts(bootstrap, topic, members, range(BURSTS))
    wait_until(
        lambda: _state_log_start(bootstrap) > 0,
        30,
        f"{SHARE_STATE_TOPIC}-0 pruned",
        lambda: pruning_broker.read_log()[-3000:],
    )
    assert f"pruned {SHARE_STATE_TOPIC}-0: its log starts at" in pruning_broker.read_log()
    pruned_at = _state_log_start(bootstrap)
    # More updates after the pruning, so that the state the restart loads is most likely
    # a snapshot and the updates after it (not a snapshot alone).
    _bursts(bootstrap, topic, members, range(BURSTS, BURSTS + TAIL_BURSTS))

    pruning_broker.kill()  # SIGKILL
    pruning_broker.start()
    _produce(bootstrap, topic, [f"w{i}" for i in range(100)])
    wait_until(
        lambda: set(_accepted(members)) == set(range(1 + (BURSTS + TAIL_BURSTS) * BURST + 100)),
        90,
        "every record accepted after the restart",
        lambda: story(members),
    )
    assert max(_accepted(members).values()) == 1, "a record was accepted twice"
    for member in members:  # no member got a record after its acceptance was confirmed
        accepted: set[int] = set()
        for event, _, offset, kind in list(member.timeline):
            if event == "acked" and kind == ACCEPT:
                accepted.add(offset)
            elif event == "got":
                assert offset not in accepted, f"{offset} delivered again after its acceptance"
    assert _state_log_start(bootstrap) >= pruned_at  # the start survived the kill
    loads = [
        line
        for line in pruning_broker.read_log().splitlines()
        if f"share-partition states of {SHARE_STATE_TOPIC}-0" in line and "loaded from" in line
    ]
    assert loads, "the coordinator never loaded the partition"
    loaded_from = int(loads[-1].rsplit("loaded from offset ", 1)[1].rstrip(")"))
    assert loaded_from >= pruned_at > 0, loads[-1]
