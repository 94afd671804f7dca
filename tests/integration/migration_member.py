"""A consumer-group member in its own process that consumes in batches and commits each
batch synchronously, for the classic <-> consumer protocol migration tests.

    python migration_member.py BOOTSTRAP GROUP TOPIC '{"extra": "confluent config"}'

Prints one JSON line per event on stdout, each with the system-wide monotonic time it
happened at ("at"):
- {"ready": true} once subscribed;
- {"assigned": [...]}, {"revoked": [...]} from the rebalance callbacks (a lost partition
  is reported as revoked);
- {"processed": [partition, [[offset, value], ...]]}: a batch's records of one partition,
  printed BEFORE their commit;
- then {"committed": [partition, next_offset]} once the synchronous commit succeeded, or
  {"commit_failed": [partition, next_offset, "error"]};
- {"error": {"code": "GROUP_ID_NOT_FOUND", "reason": "...", "fatal": false}} for each
  error the client reports (a consumer error from consume(), or the error callback);
- {"closed": true} after a clean close.

SIGTERM lets the current batch finish and be committed, then closes the consumer (the
member leaves its group) and exits.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

BATCH_SIZE = 50


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({**event, "at": time.monotonic()}) + "\n")
    sys.stdout.flush()


def error_event(error: KafkaError) -> dict[str, Any]:
    return {"error": {"code": error.name(), "reason": error.str(), "fatal": error.fatal()}}


def main() -> None:
    bootstrap, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "error_cb": lambda error: emit(error_event(error)),
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

    def assigned(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit({"assigned": sorted(p.partition for p in partitions)})

    def revoked(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit({"revoked": sorted(p.partition for p in partitions)})

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    emit({"ready": True})
    while not stopping:
        batch: dict[int, list[Message]] = {}
        for message in consumer.consume(BATCH_SIZE, 0.1):
            error = message.error()
            if error is not None:
                emit(error_event(error))
            else:
                batch.setdefault(int(message.partition() or 0), []).append(message)
        for partition, messages in sorted(batch.items()):
            records = [[m.offset(), (m.value() or b"").decode()] for m in messages]
            emit({"processed": [partition, records]})
            next_offset = int(messages[-1].offset() or 0) + 1
            try:  # one partition per commit: it succeeds or fails as a whole
                consumer.commit(message=messages[-1], asynchronous=False)
            except KafkaException as exc:
                emit({"commit_failed": [partition, next_offset, str(exc)]})
                continue
            emit({"committed": [partition, next_offset]})
    consumer.close()
    emit({"closed": True})


if __name__ == "__main__":
    main()
