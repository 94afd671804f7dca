"""A consumer-group member in its own process, so tests can kill it with SIGKILL.

    python group_member.py BOOTSTRAP GROUP TOPIC '{"extra": "confluent config"}'

Prints one JSON line per event on stdout: {"assigned": [...]}, {"revoked": [...]},
{"record": [partition, offset, value]} (printed after the record's offset is committed),
the callbacks' events with the system-wide monotonic time they ran at ("at"),
{"ready": true} once subscribed. SIGTERM closes the consumer cleanly (LeaveGroup unless
it is a static member) and exits.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **json.loads(extra),
    }
    if config.get("group.protocol") == "consumer":  # KIP-848: the broker sets these
        del config["session.timeout.ms"], config["heartbeat.interval.ms"]
    consumer = Consumer(config)
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
        emit({"assigned": sorted(p.partition for p in partitions), "at": time.monotonic()})

    def revoked(c: Consumer, partitions: list[TopicPartition]) -> None:
        emit({"revoked": sorted(p.partition for p in partitions), "at": time.monotonic()})

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    emit({"ready": True})
    while not stopping:
        message = consumer.poll(0.1)
        if message is None or message.error():
            continue
        try:
            consumer.commit(message, asynchronous=False)
        except KafkaException as exc:
            # A rebalance took the partition away: the next owner reads it again.
            emit({"commit_failed": str(exc)})
            continue
        value = message.value().decode()
        emit({"record": [message.partition(), message.offset(), value]})
    consumer.close()
    emit({"closed": True})


if __name__ == "__main__":
    main()
