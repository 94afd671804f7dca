"""What bounding a request's array counts costs its decoding: `decode_request` with the
walk of strom.protocol.bounds (every count checked against the bytes left, before kio
decodes the body) against the same decoding without it, alternating in one run.

    .venv/bin/python bench/request_decode.py [--rounds 5]

Requests as librdkafka sends them: Produce v9 with one 16 KiB record batch per partition
(1 and 8 partitions), and Fetch v12 of 6 and 1,000 partitions. Prints microseconds per
request, the best round of each way, and the difference.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable

from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from strom.client.codec import encode_request
from strom.protocol import codec
from strom.protocol.bounds import check_array_counts

BATCH_BYTES = 16384


def produce_frame(partitions: int) -> bytes:
    data = tuple(
        produce_v9.PartitionProduceData(index=i32(i), records=Records(b"x" * BATCH_BYTES))
        for i in range(partitions)
    )
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(produce_v9.TopicProduceData(name=TopicName("t"), partition_data=data),),
    )
    return encode_request(0, 9, 1, body, client_id="bench")[4:]


def fetch_frame(partitions: int) -> bytes:
    wanted = tuple(
        fetch_v12.FetchPartition(
            partition=i32(i), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
        )
        for i in range(partitions)
    )
    body = fetch_v12.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        topics=(fetch_v12.FetchTopic(topic=TopicName("t"), partitions=wanted),),
        forgotten_topics_data=(),
    )
    return encode_request(1, 12, 1, body, client_id="bench")[4:]


def _no_walk(*_: object) -> None:
    return None


def per_request_us(frame: bytes, walk: Callable[..., object], count: int) -> float:
    codec.check_array_counts = walk  # type: ignore[attr-defined,assignment]
    start = time.perf_counter()
    for _ in range(count):
        codec.decode_request(frame)
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    frames = {
        "Produce v9, 1 partition": (produce_frame(1), 2000),
        "Produce v9, 8 partitions": (produce_frame(8), 2000),
        "Fetch v12, 6 partitions": (fetch_frame(6), 2000),
        "Fetch v12, 1,000 partitions": (fetch_frame(1000), 100),
    }
    print("| request | without the walk, µs | with the walk, µs | difference, µs |")
    print("|---|---|---|---|")
    for name, (frame, count) in frames.items():
        without: list[float] = []
        with_walk: list[float] = []
        for _ in range(args.rounds):
            without.append(per_request_us(frame, _no_walk, count))
            with_walk.append(per_request_us(frame, check_array_counts, count))
        best_without, best_with = min(without), min(with_walk)
        print(f"| {name} | {best_without:.1f} | {best_with:.1f} | {best_with - best_without:.1f} |")
    codec.check_array_counts = check_array_counts  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
