"""What the admin tests share: admin clients of both libraries, creating and describing
topics, a broker's partition directories, and producing, consuming and watermarks.

Each takes the broker's bootstrap address (or its log dir), so that the tests on the
`strom_broker` fixture and those on a `strom serve` process share them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kafka
import kafka.admin
import kafka.errors
import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

TIMEOUT_S = 30.0
NODE_ID = 1  # strom serve's default node.id, and the fixture's node


# --- helpers ---------------------------------------------------------------------------


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ck_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@contextmanager
def kp_admin(bootstrap: str) -> Iterator[kafka.KafkaAdminClient]:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        yield admin
    finally:
        admin.close()


def ck_create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> None:
    futures = admin.create_topics(
        list(topics), validate_only=validate_only, request_timeout=TIMEOUT_S
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def ck_create_error(admin: AdminClient, topic: NewTopic, **kwargs: Any) -> KafkaError:
    """The error the broker answers a create with (fails the test if it succeeds)."""
    [future] = admin.create_topics([topic], request_timeout=TIMEOUT_S, **kwargs).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error


def kp_create_codes(admin: kafka.KafkaAdminClient, topics: dict[str, Any]) -> dict[str, int]:
    result = admin.create_topics(topics, raise_errors=False)
    return {t["name"]: t["error_code"] for t in result["topics"]}


def ck_topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def ck_describe(admin: AdminClient, topic: str) -> Any:
    [future] = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S).values()
    return future.result(timeout=TIMEOUT_S)


def ck_topic_configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    [future] = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic)], request_timeout=TIMEOUT_S
    ).values()
    return dict(future.result(timeout=TIMEOUT_S))


def partition_dirs(log_dir: Path, topic: str) -> list[Path]:
    return sorted(log_dir.glob(f"{topic}-*"))


def produce(bootstrap: str, topic: str, values: dict[int, list[bytes]], **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors: list[Any] = []
    try:
        for partition, batch in values.items():
            for value in batch:
                producer.produce(
                    topic,
                    value=value,
                    key=b"k",
                    partition=partition,
                    on_delivery=lambda err, _msg: err is not None and errors.append(err),
                )
        assert producer.flush(TIMEOUT_S) == 0
    finally:
        producer.purge()
        producer.flush(5)
    assert not errors, errors


def consume(bootstrap: str, topic: str, counts: dict[int, int]) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strom-admin-it",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[int, list[bytes]] = {p: [] for p in counts}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        deadline = time.monotonic() + TIMEOUT_S
        while any(len(got[p]) < n for p, n in counts.items()):
            assert time.monotonic() < deadline, f"consumed {got} of {counts}"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None:
                    got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strom-admin-wm"})
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    return int(low), int(high)
