"""Random controller command sequences: the image stays consistent and rebuildable.

Each command is decided against the current image; its records travel as one encoded
Raft entry and are replayed. After every step the invariants hold (a leader is -1 or an
unfenced ISR member, the ISR is a non-empty subset of the replicas, epochs never go
back), and the image equals both the image replayed from the encoded entries and the
image restored from a snapshot (plus the entries after it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from cluster_harness import DEFAULTS, incarnation
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata import brokers, controller
from strom.metadata.configs import (
    AlterConfigOp,
    ConfigEntryChange,
    ConfigResourceChange,
    alter_configs,
)
from strom.metadata.controller import NewTopic
from strom.metadata.image import MetadataImage
from strom.metadata.records import ConfigResourceType, MetadataRecord, decode_entry, encode_entry
from strom.metadata.snapshot import decode_snapshot, encode_snapshot

BROKER_IDS = st.integers(1, 4)
TOPICS = st.sampled_from(["t0", "t1", "t2", "u0"])

COMMANDS = st.one_of(
    st.tuples(st.just("register"), BROKER_IDS, st.integers(0, 2), st.booleans()),
    st.tuples(
        st.just("heartbeat"),
        BROKER_IDS,
        st.sampled_from([0, 0, 0, 1, 3]),  # how far behind the broker's metadata is
        st.sampled_from([False, False, False, True]),  # a stale epoch
        st.sampled_from([(False, False), (True, False), (False, True)]),
    ),
    st.tuples(st.just("fence"), st.lists(BROKER_IDS, max_size=3)),
    st.tuples(st.just("create"), TOPICS, st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("delete"), TOPICS),
    st.tuples(st.just("prefer")),
    st.tuples(st.just("producer_ids"), BROKER_IDS),
    st.tuples(st.just("unregister"), BROKER_IDS),
    st.tuples(
        st.just("alter"),
        st.sampled_from(["t0", "t1", "", "1", "2"]),
        st.sampled_from(
            [
                ("retention.ms", "1000", AlterConfigOp.SET),
                ("cleanup.policy", "compact", AlterConfigOp.APPEND),
                ("cleanup.policy", "delete", AlterConfigOp.SUBTRACT),
                ("retention.ms", None, AlterConfigOp.DELETE),
                ("log.retention.ms", "5", AlterConfigOp.SET),
                ("log.cleanup.policy", "compact", AlterConfigOp.APPEND),
                ("unclean.leader.election.enable", "true", AlterConfigOp.SET),
            ]
        ),
    ),
)


def unclean(topic: str) -> bool:
    return topic.startswith("u")


def decide(image: MetadataImage, command: tuple[Any, ...]) -> Sequence[MetadataRecord]:
    match command:
        case ("register", broker_id, generation, alive):
            return brokers.register_broker(
                image, broker_id, incarnation(broker_id, generation), "h", 1, None,
                session_alive=alive,
            )[0]  # fmt: skip
        case ("heartbeat", broker_id, lag, stale, (want_fence, want_shutdown)):
            registered = image.brokers.get(broker_id)
            epoch = -1 if registered is None else registered.epoch - (1 if stale else 0)
            return brokers.broker_heartbeat(
                image, broker_id, epoch, image.offset - lag, want_fence, want_shutdown,
                unclean=unclean,
            )[0]  # fmt: skip
        case ("fence", broker_ids):
            return brokers.fence_brokers(image, broker_ids, unclean=unclean)
        case ("create", name, partitions, factor):
            return controller.create_topics(
                image,
                [NewTopic(name, partitions, factor)],
                defaults=DEFAULTS,
                brokers=image.live_broker_ids(),
                rng=random.Random(image.offset),
            )[0]
        case ("delete", name):
            return controller.delete_topics(image, [name])[0]
        case ("prefer",):
            return brokers.preferred_leader_elections(image)
        case ("producer_ids", broker_id):
            registered = image.brokers.get(broker_id)
            epoch = -1 if registered is None else registered.epoch
            return brokers.allocate_producer_ids(image, broker_id, epoch, 10)[0]
        case ("unregister", broker_id):
            return brokers.unregister_broker(image, broker_id, unclean=unclean)[0]
        case ("alter", name, (key, value, op)):
            kind = ConfigResourceType.TOPIC if name.startswith("t") else ConfigResourceType.BROKER
            change = ConfigResourceChange(kind, name, [ConfigEntryChange(key, value, op)])
            return alter_configs(image, [change], incremental=True)[0]
    raise AssertionError(command)


def check_invariants(before: MetadataImage, after: MetadataImage) -> None:
    for topic, p in after.partitions():
        assert p.isr, (topic.name, p)
        assert len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), p
        assert p.leader == -1 or (p.leader in p.isr and after.is_live(p.leader)), p
        old_topic = before.topics_by_id.get(topic.topic_id)
        old = None if old_topic is None else old_topic.partitions.get(p.partition)
        if old is not None:
            assert p.leader_epoch >= old.leader_epoch and p.partition_epoch >= old.partition_epoch
            if (p.leader, p.isr) != (old.leader, old.isr):
                assert p.partition_epoch > old.partition_epoch
            if p.leader != old.leader:
                assert p.leader_epoch > old.leader_epoch
    for broker_id, broker in after.brokers.items():
        old_broker = before.brokers.get(broker_id)
        assert old_broker is None or broker.epoch >= old_broker.epoch
    assert after.next_producer_id >= before.next_producer_id


# Four live brokers and three replicated topics, then the random commands.
PREAMBLE: list[tuple[Any, ...]] = [
    *(("register", b, 0, False) for b in (1, 2, 3, 4)),
    *(("heartbeat", b, 0, False, (False, False)) for b in (1, 2, 3, 4)),
    ("create", "t0", 3, 3),
    ("create", "t1", 2, 2),
    ("create", "u0", 2, 2),
]


@settings(max_examples=150, deadline=None)
@given(st.lists(COMMANDS, max_size=40), st.integers(0, 50))
def test_random_commands_keep_the_image_consistent_and_rebuildable(
    commands: list[tuple[Any, ...]], snapshot_at: int
) -> None:
    image = MetadataImage.empty()
    entries: list[bytes] = []
    snapshot: tuple[bytes, int] | None = None
    for step, command in enumerate(PREAMBLE + commands):
        if step == snapshot_at:
            snapshot = (encode_snapshot(image), len(entries))
        records = decide(image, command)
        if not records:
            continue
        entries.append(encode_entry(records))
        after = image.replay(decode_entry(entries[-1]))
        check_invariants(image, after)
        image = after
    replayed = MetadataImage.empty()
    for entry in entries:
        replayed = replayed.replay(decode_entry(entry))
    assert replayed == image
    assert decode_snapshot(encode_snapshot(image)) == image
    if snapshot is not None:
        restored = decode_snapshot(snapshot[0])
        for entry in entries[snapshot[1] :]:
            restored = restored.replay(decode_entry(entry))
        assert restored == image
