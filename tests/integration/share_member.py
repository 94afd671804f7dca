"""A share-group member (confluent-kafka's ShareConsumer) in its own process, so tests can
kill it with SIGKILL.

    python share_member.py BOOTSTRAP GROUP TOPIC '{"release": [...], "reject": [...]}'

Explicit acknowledgement: every record the member receives is printed as
{"got": [partition, offset, value, delivery_count]}, then acknowledged: RELEASE if its
value is in "release" (every time it comes), REJECT if its value is in "reject", ACCEPT
otherwise. After each poll's acknowledgements are committed (commit_sync), the
partitions the broker accepted them for are printed as {"acked": [[partition, offset,
type], ...]}, the records whose acknowledgement is durable. {"ready": true} once
subscribed; "hold_s" makes the member sleep that long after its first records without
acknowledging them (so the test can kill it while it holds them). SIGTERM closes the
consumer (which leaves the group) and exits.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    rules = json.loads(extra)
    release = set(rules.pop("release", []))
    reject = set(rules.pop("reject", []))
    hold_s = float(rules.pop("hold_s", 0))
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            **rules,
        }
    )
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    consumer.subscribe([topic])
    emit({"ready": True})
    while not stopping:
        try:
            messages = consumer.poll(0.2)
        except KafkaException as exc:
            emit({"error": str(exc)})
            continue
        decided: list[tuple[int, int, int]] = []
        for message in messages:
            if message.error() is not None:
                emit({"error": str(message.error())})
                continue
            value = message.value().decode()
            emit({"got": [message.partition(), message.offset(), value, message.delivery_count()]})
            if value in release:
                kind = AcknowledgeType.RELEASE
            elif value in reject:
                kind = AcknowledgeType.REJECT
            else:
                kind = AcknowledgeType.ACCEPT
            consumer.acknowledge(message, kind)
            decided.append((message.partition(), message.offset(), int(kind)))
        if hold_s and decided:
            time.sleep(hold_s)
            hold_s = 0
        if not decided:
            continue
        try:
            results = consumer.commit_sync(30)
        except KafkaException as exc:
            emit({"commit_failed": str(exc)})
            continue
        durable = {tp.partition for tp, error in results.items() if error is None}
        for tp, error in results.items():
            if error is not None:
                emit({"commit_failed": f"{tp.topic}/{tp.partition}: {error}"})
        emit({"acked": [d for d in decided if d[0] in durable]})
    consumer.close()
    emit({"closed": True})


if __name__ == "__main__":
    main()
