"""Tests of the order totals service (order_totals.py) against a real cluster, with
faults, through strom's pytest plugin: the fixtures `strom_broker` (one node) and
`strom_cluster` (three) come with strom, no conftest needed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from order_totals import GROUP, ORDERS, TOTALS, Delivery, Order, OrderTotals, produce_orders, result

from strom.testing import StromCluster

PARTITIONS = 3
QUICK = {"heartbeat.interval.ms": 100}
"""The service learns of a rebalance at its next heartbeat: every 100 ms, not 3 s."""


def make_orders(count: int, first: int = 0) -> list[Order]:
    """Orders from twelve customers, each of one to three lines."""
    return [
        Order(f"order-{i}", f"customer-{i % 12}", tuple((1 + j, 150 + i) for j in range(1 + i % 3)))
        for i in range(first, first + count)
    ]


def create_topics(cluster: StromCluster) -> None:
    cluster.create_topic(ORDERS, partitions=PARTITIONS)
    cluster.create_topic(TOTALS, partitions=PARTITIONS)


def produce(cluster: StromCluster, orders: list[Order]) -> list[Delivery]:
    deliveries = produce_orders(cluster.bootstrap_servers, orders)
    assert [d for d in deliveries if d.error is not None] == []
    return deliveries


def end_offsets(cluster: StromCluster, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "test"})
    try:
        partitions = consumer.list_topics(topic, 10).topics[topic].partitions
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions]
    finally:
        consumer.close()


def committed_offsets(cluster: StromCluster) -> list[int]:
    """The group's committed offsets on `orders`, by partition (-1001 where none)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP})
    try:
        wanted = [TopicPartition(ORDERS, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(wanted, 10)]
    finally:
        consumer.close()


def read_all(cluster: StromCluster, topic: str) -> list[Message]:
    """Every record in `topic` now, partition after partition, each in log order."""
    ends = end_offsets(cluster, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "test",
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(len(ends))])
    read: list[Message] = []

    def read_to_the_end() -> bool:
        read.extend(m for m in consumer.consume(100, 0.1) if m.error() is None)
        return len(read) >= sum(ends)

    try:
        cluster.wait_until(read_to_the_end, 30, f"{sum(ends)} records of {topic}")
    finally:
        consumer.close()
    assert len(read) == sum(ends)
    return sorted(read, key=lambda m: (m.partition() or 0, m.offset() or 0))


def run_until_caught_up(cluster: StromCluster, *services: OrderTotals) -> None:
    """Turn every service's loop until the group has committed every order."""
    ends = end_offsets(cluster, ORDERS)
    step_until(cluster, lambda: committed_offsets(cluster) == ends, *services)


def step_until(cluster: StromCluster, done: Callable[[], bool], *services: OrderTotals) -> None:
    """Turn every service's loop until `done()`."""

    def stepped() -> bool:
        for service in services:
            service.step()
        return done()

    cluster.wait_until(stepped, 30, "the services to get there")


def group_is_stable(cluster: StromCluster, members: int) -> bool:
    group = cluster.group(GROUP)
    return group is not None and group.state == "Stable" and len(group.members) == members


def results_by_order(cluster: StromCluster) -> Counter[tuple[str, bytes]]:
    """(order id, value) of every output record, with how often it was written."""
    return Counter(((m.key() or b"").decode(), m.value() or b"") for m in read_all(cluster, TOTALS))


def assert_each_order_has_its_total(
    written: Counter[tuple[str, bytes]], orders: list[Order]
) -> None:
    """Every order has a total, and every total written for an order is the same: a
    reader that keeps one record per key sees each order once, with the right total."""
    assert set(written) == {(o.order_id, result(o)) for o in orders}


# --- one node --------------------------------------------------------------------------


def test_every_order_gets_exactly_one_total(strom_broker: StromCluster) -> None:
    create_topics(strom_broker)
    orders = make_orders(50)
    produce(strom_broker, orders)

    with OrderTotals(strom_broker.bootstrap_servers) as service:
        run_until_caught_up(strom_broker, service)
        assert (service.processed, service.refused) == (50, 0)

    written = results_by_order(strom_broker)
    assert written == Counter((order.order_id, result(order)) for order in orders)
    assert committed_offsets(strom_broker) == end_offsets(strom_broker, ORDERS)


def test_each_customers_orders_stay_in_order(strom_broker: StromCluster) -> None:
    create_topics(strom_broker)
    orders = make_orders(60)
    place = {d.order_id: (d.partition, d.offset) for d in produce(strom_broker, orders)}

    for customer in {order.customer for order in orders}:
        places = [place[o.order_id] for o in orders if o.customer == customer]
        assert len({partition for partition, _ in places}) == 1, customer
        assert places == sorted(places), customer


def test_a_burst_of_not_leader_answers_is_retried_and_written_once(
    strom_broker: StromCluster,
) -> None:
    create_topics(strom_broker)
    strom_broker.fail_requests("PRODUCE", "NOT_LEADER_OR_FOLLOWER", count=3)
    assert strom_broker.pending_faults("PRODUCE") == 3

    orders = make_orders(30)
    deliveries = produce(strom_broker, orders)

    assert strom_broker.pending_faults() == 0  # the producer met all three answers
    in_log = read_all(strom_broker, ORDERS)
    assert sorted(Order.decode(m.value()).order_id for m in in_log) == sorted(
        o.order_id for o in orders
    )
    assert sorted((d.partition, d.offset) for d in deliveries) == [
        (m.partition(), m.offset()) for m in in_log
    ]


def test_an_instance_joining_mid_way_loses_no_order_and_repeats_only_refused_ones(
    strom_broker: StromCluster,
) -> None:
    cluster = strom_broker
    create_topics(cluster)
    first, second = make_orders(150), make_orders(150, first=150)
    produce(cluster, first)

    with OrderTotals(cluster.bootstrap_servers, settings=QUICK) as a:
        step_until(cluster, lambda: a.processed >= 40, a)
        with OrderTotals(cluster.bootstrap_servers, settings=QUICK) as b:
            # b's join rebalances the group while a has orders left to process
            step_until(cluster, lambda: group_is_stable(cluster, members=2), a, b)
            produce(cluster, second)  # on every partition, so b has orders to process
            run_until_caught_up(cluster, a, b)
    assert b.processed > 0

    orders = first + second
    written = results_by_order(cluster)
    assert_each_order_has_its_total(written, orders)
    processed = a.processed + b.processed
    assert written.total() == processed  # one output record each time an order is processed
    assert processed - len(orders) <= a.refused + b.refused  # repeats: only refused commits


def test_a_rebalance_forced_mid_way_loses_no_order(strom_broker: StromCluster) -> None:
    cluster = strom_broker
    create_topics(cluster)
    first, second = make_orders(150), make_orders(150, first=150)
    produce(cluster, first)

    with OrderTotals(cluster.bootstrap_servers, settings=QUICK) as service:
        step_until(cluster, lambda: service.processed >= 40, service)
        cluster.rebalance(GROUP)  # as if a member had come or gone
        step_until(cluster, lambda: group_is_stable(cluster, members=1), service)
        produce(cluster, second)
        run_until_caught_up(cluster, service)

    orders = first + second
    written = results_by_order(cluster)
    assert_each_order_has_its_total(written, orders)
    assert written.total() == service.processed
    assert service.processed - len(orders) <= service.refused


# --- three nodes -----------------------------------------------------------------------


@pytest.mark.strom(nodes=3, config={"min.insync.replicas": 2})
def test_the_leader_killed_while_orders_are_written_loses_and_repeats_none(
    strom_cluster: StromCluster,
) -> None:
    cluster = strom_cluster
    cluster.create_topic(ORDERS, partitions=1, replication_factor=3)
    orders = make_orders(300)
    killed: list[int] = []

    def orders_with_a_crash() -> Iterator[Order]:
        """A hundred orders, acknowledged; a hundred more, and the leader dies while the
        request with them is on its way; then a hundred more."""
        yield from orders[:100]
        cluster.wait_until(lambda: end_offsets(cluster, ORDERS) == [100], 20, "100 acks")
        leader = cluster.wait_for_leader(ORDERS)
        cluster.delay_requests("PRODUCE", 2.0, node_id=leader)  # the network holds it
        yield from orders[100:200]
        cluster.wait_until(lambda: cluster.pending_faults() == 0, 20, "a write on its way")
        cluster.crash_node(leader)
        killed.append(leader)
        yield from orders[200:]

    deliveries = produce_orders(cluster.bootstrap_servers, orders_with_a_crash())

    assert [d for d in deliveries if d.error is not None] == []
    assert killed and not cluster.is_running(killed[0])  # it did die mid-way
    assert [(d.order_id, d.offset) for d in deliveries] == [
        (o.order_id, offset) for offset, o in enumerate(orders)
    ]
    in_log = [Order.decode(m.value()) for m in read_all(cluster, ORDERS)]
    assert [o.order_id for o in in_log] == [o.order_id for o in orders]  # once each, in order
