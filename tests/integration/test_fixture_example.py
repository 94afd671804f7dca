"""The worked example of docs/testing.md, as written there: commits across a forced
rebalance and a leader failover. Keep the two in step."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import StromCluster


def make_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "totals",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def process(consumer: Consumer, totals: dict[str, int], budget: int) -> None:
    """Handle up to `budget` records, committing each one after it is counted."""
    for _ in range(budget):
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        event = json.loads(message.value())
        totals[event["account"]] = totals.get(event["account"], 0) + event["amount"]
        consumer.commit(message, asynchronous=False)


@pytest.mark.strom(nodes=3)
def test_commits_survive_a_rebalance_and_a_failover(strom_cluster: StromCluster) -> None:
    cluster = strom_cluster
    cluster.create_topic("payments", partitions=3, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(300):
        event = {"account": f"a{i % 7}", "amount": 1}
        producer.produce("payments", json.dumps(event), partition=i % 3)
    assert producer.flush(30) == 0

    consumer = make_consumer(cluster.bootstrap_servers)
    consumer.subscribe(["payments"])
    totals: dict[str, int] = {}
    process(consumer, totals, 50)

    cluster.rebalance("totals")  # the coordinator rebalances the group
    process(consumer, totals, 50)

    leader = cluster.leader("payments", 0)
    assert leader is not None
    cluster.crash_node(leader)  # kill -9 the partition's leader
    cluster.wait_for_leader("payments", 0, not_on=leader)

    def processed_all() -> bool:
        process(consumer, totals, 20)
        return sum(totals.values()) >= 300

    cluster.wait_until(processed_all, 60, "every payment processed")

    assert sum(totals.values()) == 300  # none twice, none lost
    committed = consumer.committed([TopicPartition("payments", p) for p in range(3)])
    ends = [consumer.get_watermark_offsets(tp)[1] for tp in committed]
    assert [tp.offset for tp in committed] == ends
    consumer.close()
