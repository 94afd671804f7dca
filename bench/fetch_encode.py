"""What serving a Fetch costs the broker besides reading the log: encoding the response.

    .venv/bin/python bench/fetch_encode.py [--repeat 50]

Encodes Fetch v12 responses with the broker's own encoder (strom.protocol.codec, kio
underneath) for a few shapes: one or eight partitions of 1 MiB of records (the bytes a
zero-copy send would spare the broker from copying), and many partitions with little or
nothing in them (what the per-partition work costs). Prints milliseconds per response and
the copying rate for the large ones. No broker, no socket: the encoder alone.
"""

from __future__ import annotations

import argparse
import os
import timeit
from typing import Any

from kio.index import load_response_schema

from strom.protocol.codec import build, encode_response

FETCH_KEY, VERSION = 1, 12
SHAPES = ((1, 1 << 20), (8, 1 << 20), (100, 1000), (1000, 0))


def response(partitions: int, record_bytes: int) -> Any:
    records = os.urandom(record_bytes)
    entry = {
        "error_code": 0,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    return build(
        load_response_schema(FETCH_KEY, VERSION),
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": "t",
                    "topic_id": None,
                    "partitions": [entry | {"partition_index": i} for i in range(partitions)],
                }
            ],
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    print(f"{'partitions':>10}  {'bytes each':>10}  {'ms per response':>15}  {'GB/s':>6}")
    for partitions, record_bytes in SHAPES:
        body = response(partitions, record_bytes)
        seconds = min(
            timeit.repeat(lambda b=body: encode_response(1, b), number=args.repeat, repeat=3)
        )
        each = seconds / args.repeat
        rate = partitions * record_bytes / each / 1e9 if record_bytes else 0.0
        print(f"{partitions:>10}  {record_bytes:>10,}  {each * 1e3:>15.3f}  {rate:>6.1f}")


if __name__ == "__main__":
    main()
