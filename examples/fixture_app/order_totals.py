"""Order totals: a small consume-process-produce service on confluent-kafka.

It reads orders (JSON) from the topic `orders` and writes one result per order to
`order-totals`: the order's total, keyed by the order id. Instances with the same group
share the partitions of `orders`.

At-least-once: a batch's offsets are committed, synchronously, only once every result of
the batch is acknowledged (an idempotent producer, acks=all). A rebalance between the two
can refuse the commit; then the batch is processed again, here or by the instance that
takes the partitions over. A repeated result has the same key and the same bytes, so a
reader that keeps one record per key (or a compacted topic) sees each order once.

    python order_totals.py 127.0.0.1:9092     # runs until Ctrl-C
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

ORDERS = "orders"
TOTALS = "order-totals"
GROUP = "order-totals"
FLUSH_TIMEOUT_S = 60.0
REFUSED = {
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
}
"""Commit errors that mean the group moved on without this batch."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    customer: str
    lines: tuple[tuple[int, int], ...]  # (quantity, unit price in cents)

    def encode(self) -> bytes:
        lines = [{"quantity": q, "price_cents": p} for q, p in self.lines]
        return json.dumps({"id": self.order_id, "customer": self.customer, "lines": lines}).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> Order:
        raw = json.loads(data or b"")
        lines = tuple((int(line["quantity"]), int(line["price_cents"])) for line in raw["lines"])
        return cls(str(raw["id"]), str(raw["customer"]), lines)


def result(order: Order) -> bytes:
    """The record written for an order: the same bytes however often it is processed."""
    total_cents = sum(quantity * price for quantity, price in order.lines)
    total = {"id": order.order_id, "customer": order.customer, "total_cents": total_cents}
    return json.dumps(total, sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class Delivery:
    """The broker's answer for one order: where it was written, or why it was not."""

    order_id: str
    partition: int | None
    offset: int | None
    error: str | None


def produce_orders(
    bootstrap: str, orders: Iterable[Order], *, topic: str = ORDERS, timeout_s: float = 60.0
) -> list[Delivery]:
    """Write orders keyed by customer (a customer's orders stay in order), each one
    acknowledged by every in-sync replica; the delivery reports, as they came. A leader
    that dies or refuses a write is librdkafka's to ride out: it finds the new leader and
    sends again, and idempotence keeps those retries from writing anything twice."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    deliveries: list[Delivery] = []

    def report(order_id: str, error: KafkaError | None, message: Message) -> None:
        failure = None if error is None else error.name()
        deliveries.append(Delivery(order_id, message.partition(), message.offset(), failure))

    for order in orders:
        report_this = partial(report, order.order_id)
        producer.produce(topic, order.encode(), key=order.customer, on_delivery=report_this)
        producer.poll(0)
    if producer.flush(timeout_s) > 0:
        raise TimeoutError(f"orders still unacknowledged after {timeout_s:g} s")
    return deliveries


class OrderTotals:
    """One instance of the service; `step()` is one turn of its loop."""

    def __init__(
        self, bootstrap: str, *, batch_size: int = 20, settings: Mapping[str, object] | None = None
    ) -> None:
        """`settings`: more librdkafka settings for the consumer, such as its timeouts."""
        self.batch_size = batch_size
        self.processed = 0  # orders handled, repeats included
        self.refused = 0  # orders whose totals were written but whose commit was refused
        self._failed: list[KafkaError] = []
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **(settings or {}),
            }
        )
        self.consumer.subscribe([ORDERS])

    def step(self, timeout_s: float = 0.1) -> int:
        """Read a batch of orders, write their totals, then commit; how many there were.
        (Errors in the batch are librdkafka's news of problems it recovers from itself.)"""
        batch = [m for m in self.consumer.consume(self.batch_size, timeout_s) if m.error() is None]
        for message in batch:
            order = Order.decode(message.value())
            self.producer.produce(TOTALS, result(order), key=order.order_id, on_delivery=self._sent)
        if self.producer.flush(FLUSH_TIMEOUT_S) > 0:
            raise TimeoutError(f"totals still unacknowledged after {FLUSH_TIMEOUT_S:g} s")
        if self._failed:  # no commit: whoever runs next processes the batch again
            raise KafkaException(self._failed[0])
        self.processed += len(batch)
        if batch:
            self._commit(batch)
        return len(batch)

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(FLUSH_TIMEOUT_S)

    def __enter__(self) -> OrderTotals:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _sent(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failed.append(error)

    def _commit(self, batch: list[Message]) -> None:
        # a batch holds each partition's records in log order: the last one wins
        last = {(m.topic() or "", m.partition() or 0): m.offset() or 0 for m in batch}
        offsets = [TopicPartition(topic, p, offset + 1) for (topic, p), offset in last.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() not in REFUSED:
                raise
            log.warning("commit refused (%s): %d orders to process again", exc, len(batch))
            self.refused += len(batch)


def main(bootstrap: str) -> None:
    with OrderTotals(bootstrap) as service, contextlib.suppress(KeyboardInterrupt):
        while True:
            service.step(1.0)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092")
