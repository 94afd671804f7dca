"""ElectLeaders as a pure decision (see metadata/elect_leaders.py): preferred and unclean
elections, what needs none, what cannot be done, and the null "every partition"."""

from __future__ import annotations

from collections.abc import Sequence

from cluster_harness import (
    cluster,
    commit,
    create_topic,
    fence,
    heartbeat,
    partition,
    rejoin,
    state,
)
from kio.schema.errors import ErrorCode

from strom.metadata.elect_leaders import (
    ElectionType,
    PartitionElection,
    TopicElections,
    TopicPartitions,
    elect_leaders,
)
from strom.metadata.image import MetadataImage
from strom.metadata.records import MetadataRecord, PartitionChangeRecord

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def elect(
    image: MetadataImage,
    election_type: ElectionType,
    requested: Sequence[TopicPartitions] | None,
) -> tuple[list[MetadataRecord], list[TopicElections]]:
    return elect_leaders(image, election_type, requested, is_live=image.is_live)


def codes(answers: Sequence[TopicElections]) -> list[tuple[str, list[tuple[int, ErrorCode]]]]:
    """(topic, [(partition, error code)]) of an answer."""
    return [(a.topic, [(p.partition, p.error_code) for p in a.partitions]) for a in answers]


def one(
    image: MetadataImage, election_type: ElectionType, topic: str = "t", index: int = 0
) -> tuple[list[MetadataRecord], PartitionElection]:
    """The records and the one result of an election of `topic`-`index`."""
    records, answers = elect(image, election_type, [TopicPartitions(topic, (index,))])
    [answer] = answers
    assert answer.topic == topic
    [result] = answer.partitions
    assert result.partition == index
    return records, result


def led_by_2_with_1_back_out_of_sync() -> MetadataImage:
    """t-0 with replicas [1, 2, 3]: 1 was fenced (2 took over) and is live again, not
    yet back in the ISR."""
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    image = fence(image, 1)
    image, result = heartbeat(image, 1)
    assert not result.is_fenced
    assert state(image, "t") == (2, (2, 3))
    return image


def offline_with_2_live_out_of_sync() -> MetadataImage:
    """t-0 with replicas [1, 2]: 2 fell out of the ISR, came back, and then 1 (the last
    ISR member) was fenced: no leader, ISR [1], replica 2 live."""
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    image = fence(image, 2)
    image, _ = heartbeat(image, 2)
    image = fence(image, 1)
    assert state(image, "t") == (-1, (1,))
    assert image.is_live(2) and not image.is_live(1)
    return image


# --- PREFERRED ----------------------------------------------------------------------------


def test_a_partition_led_by_its_preferred_replica_needs_no_election() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    records, result = one(image, PREFERRED)
    assert records == []
    assert result.error_code == ErrorCode.election_not_needed
    assert result.message is not None and "preferred replica 1" in result.message


def test_a_preferred_replica_out_of_the_isr_is_not_available() -> None:
    image = led_by_2_with_1_back_out_of_sync()
    records, result = one(image, PREFERRED)
    assert records == []
    assert result.error_code == ErrorCode.preferred_leader_not_available
    assert result.message is not None and "not in the ISR [2, 3]" in result.message
    assert result.leader == -1


def test_a_fenced_preferred_replica_is_not_available() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    image = fence(image, 1)
    records, result = one(image, PREFERRED)
    assert records == []
    assert result.error_code == ErrorCode.preferred_leader_not_available
    assert result.message is not None and "not live" in result.message


def test_a_preferred_election_moves_the_leader_and_bumps_the_epochs() -> None:
    image = rejoin(led_by_2_with_1_back_out_of_sync(), "t", 0, 1)
    before = partition(image, "t")
    assert (before.leader, before.isr) == (2, (2, 3, 1))
    records, result = one(image, PREFERRED)
    assert (result.error_code, result.message, result.leader) == (ErrorCode.none, None, 1)
    [record] = records
    assert isinstance(record, PartitionChangeRecord)
    assert (record.leader, record.isr, record.replicas) == (1, (2, 3, 1), None)
    image = commit(image, records)
    after = partition(image, "t")
    assert (after.leader, after.isr, after.replicas) == (1, (2, 3, 1), (1, 2, 3))
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1
    again, result = one(image, PREFERRED)
    assert again == [] and result.error_code == ErrorCode.election_not_needed


def test_a_preferred_election_of_a_leaderless_partition_takes_a_live_isr_member() -> None:
    """As Kafka's PartitionChangeBuilder: with the preferred replica unavailable and no
    live leader, the election still makes the clean choice of any election."""
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    image = fence(image, 1)
    p = partition(image, "t")
    topic_id = image.topics_by_name["t"].topic_id
    image = commit(image, [PartitionChangeRecord(topic_id, 0, -1, (1, 3), p.leader_epoch + 1, 99)])
    records, result = one(image, PREFERRED)
    assert (result.error_code, result.leader) == (ErrorCode.none, 3)
    assert state(commit(image, records), "t") == (3, (1, 3))


def test_a_preferred_election_of_an_offline_partition_without_live_isr_fails() -> None:
    image = offline_with_2_live_out_of_sync()
    records, result = one(image, PREFERRED)
    assert records == []
    assert result.error_code == ErrorCode.preferred_leader_not_available


# --- UNCLEAN ------------------------------------------------------------------------------


def test_an_unclean_election_picks_a_live_replica_outside_the_isr() -> None:
    image = offline_with_2_live_out_of_sync()
    before = partition(image, "t")
    records, result = one(image, UNCLEAN)
    assert (result.error_code, result.leader) == (ErrorCode.none, 2)
    image = commit(image, records)
    after = partition(image, "t")
    assert (after.leader, after.isr) == (2, (2,))
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1


def test_an_unclean_election_prefers_a_live_isr_member() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    topic_id = image.topics_by_name["t"].topic_id
    image = commit(image, [PartitionChangeRecord(topic_id, 0, -1, (3,), 1, 1)])
    records, result = one(image, UNCLEAN)
    assert (result.error_code, result.leader) == (ErrorCode.none, 3)
    assert state(commit(image, records), "t") == (3, (3,))


def test_a_partition_with_a_leader_needs_no_unclean_election() -> None:
    image = led_by_2_with_1_back_out_of_sync()
    records, result = one(image, UNCLEAN)
    assert records == []
    assert result.error_code == ErrorCode.election_not_needed


def test_an_unclean_election_needs_a_live_replica() -> None:
    image = offline_with_2_live_out_of_sync()
    image = fence(image, 2)
    records, result = one(image, UNCLEAN)
    assert records == []
    assert result.error_code == ErrorCode.eligible_leaders_not_available


# --- what is asked for ----------------------------------------------------------------------


def test_an_unknown_topic_or_partition_is_answered_per_partition() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    for election_type in ElectionType:
        records, answers = elect(
            image,
            election_type,
            [TopicPartitions("t", (0, 7)), TopicPartitions("nope", (0,))],
        )
        assert records == []
        assert codes(answers) == [
            ("t", [(0, ErrorCode.election_not_needed), (7, ErrorCode.unknown_topic_or_partition)]),
            ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
        ]


def test_null_topic_partitions_elects_everywhere_and_lists_only_what_was_needed() -> None:
    """Every topic is listed, as Kafka's controller lists them; partitions already led by
    their preferred replica are left out."""
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3), 1: (2, 3, 1), 2: (1, 3, 2)})
    image = create_topic(image, "u", {0: (2, 1)})
    image = fence(image, 1)
    image, _ = heartbeat(image, 1)  # 1 is live again, in no ISR
    image = create_topic(image, "v", {0: (1, 3)})  # led by 1, its preferred replica
    image = rejoin(image, "t", 2, 1)  # t-2 can go back to 1, t-0 cannot yet
    assert [state(image, "t", p)[0] for p in range(3)] == [2, 2, 3]
    records, answers = elect(image, PREFERRED, None)
    assert codes(answers) == [
        ("t", [(0, ErrorCode.preferred_leader_not_available), (2, ErrorCode.none)]),
        ("u", []),
        ("v", []),
    ]
    image = commit(image, records)
    assert [state(image, "t", p)[0] for p in range(3)] == [2, 2, 1]
    records, answers = elect(image, UNCLEAN, None)
    assert records == []
    assert [(a.topic, a.partitions) for a in answers] == [("t", ()), ("u", ()), ("v", ())]


def test_a_partition_asked_for_twice_is_elected_once() -> None:
    image = rejoin(led_by_2_with_1_back_out_of_sync(), "t", 0, 1)
    records, answers = elect(
        image, PREFERRED, [TopicPartitions("t", (0,)), TopicPartitions("t", (0, 0))]
    )
    assert len(records) == 1
    assert [[p.error_code for p in a.partitions] for a in answers] == [
        [ErrorCode.none],
        [ErrorCode.election_not_needed, ErrorCode.election_not_needed],
    ]
