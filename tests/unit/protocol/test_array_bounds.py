"""Array counts larger than the request: refused before kio's native reader sizes its
storage from them (a 40-byte frame could make it ask for 34 GB, and its allocation
failure aborts the process).

The walk must know every layout exactly, or it would refuse good requests: for every
request version the broker serves, a request with every field set (arrays of two items,
tagged fields too) is walked to its last byte."""

from __future__ import annotations

import datetime
import subprocess
import sys
import uuid
from dataclasses import fields, is_dataclass
from typing import Any, get_args, get_origin

import pytest
from kio.serial import entity_reader

from strom.client.codec import build_request
from strom.protocol.apis import SERVED_APIS
from strom.protocol.bounds import OversizedArray, _unwrap_optional, check_array_counts
from strom.protocol.codec import RequestError, build, decode_request, encode_request
from strom.protocol.codec import request_class as served_class

SERVED = [
    (int(key), v) for key, r in SERVED_APIS.items() for v in range(r.min_version, r.max_version + 1)
]


def example(entity_type: type[Any]) -> dict[str, Any]:
    """Every field of `entity_type` set, tagged ones too; arrays of two items."""
    return {f.name: _value(f.type, f.metadata.get("kafka_type", "")) for f in fields(entity_type)}


def _value(tp: Any, kafka_type: str) -> Any:
    tp, _ = _unwrap_optional(tp)
    if get_origin(tp) is tuple:
        item = _value(get_args(tp)[0], kafka_type)
        return [item, item]
    if is_dataclass(tp) and isinstance(tp, type):
        return example(tp)
    return {
        "bool": True,
        "string": "ab",
        "bytes": b"abc",
        "records": b"abcd",
        "uuid": uuid.UUID(int=7),
        "float64": 1.5,
        "error_code": 0,
        "timedelta_i32": 5,
        "timedelta_i64": 5,
        "datetime_i64": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    }.get(kafka_type, 1)


def frame_and_body(api_key: int, version: int) -> tuple[bytes, int]:
    body_type = served_class(api_key, version)
    frame = encode_request(api_key, version, 3, build(body_type, example(body_type)))[4:]
    _, header_size = entity_reader(body_type.__header_schema__)(frame, 0)
    return frame, header_size


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_served_request_is_walked_to_its_end(api_key: int, version: int) -> None:
    frame, offset = frame_and_body(api_key, version)
    assert check_array_counts(frame, offset, served_class(api_key, version)) == len(frame)
    decode_request(frame)


def _protocols_count_at(frame: bytes, version: int) -> tuple[int, int]:
    """Where the protocols' count is, and its width: before the first name's length."""
    if version >= 6:  # compact: one varint byte each
        return frame.index(b"range") - 2, 1
    return frame.index(b"range") - 2 - 4, 4  # an int16 length after an int32 count


def _join(version: int) -> bytes:
    fields_ = {
        "group_id": "g",
        "session_timeout": 30_000,
        "rebalance_timeout": 30_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"abc"}],
        "reason": None,
    }
    return encode_request(11, version, 5, build_request(11, version, fields_))[4:]


@pytest.mark.parametrize(
    ("version", "count"),
    [
        (9, b"\xff\xff\xff\xff\x0f"),  # compact: 2^32 - 2 items
        (9, b"\x80\x80\x80\x80\x01"),  # compact: 2^28 - 1
        (5, b"\x7f\xff\xff\xff"),  # legacy: 2^31 - 1
    ],
)
def test_a_count_past_the_frame_is_refused_before_kio_reads_it(version: int, count: bytes) -> None:
    frame = _join(version)
    at, width = _protocols_count_at(frame, version)
    bad = frame[:at] + count + frame[at + width :]
    _, offset = entity_reader(served_class(11, version).__header_schema__)(bad, 0)
    with pytest.raises(OversizedArray):
        check_array_counts(bad, offset, served_class(11, version))
    with pytest.raises(RequestError, match="array of"):
        decode_request(bad)


def test_the_broker_process_survives_the_frame() -> None:
    """In a child process, as a broker would decode it (an abort kills the process)."""
    frame = _join(9)
    at, width = _protocols_count_at(frame, 9)
    bad = frame[:at] + b"\xff\xff\xff\xff\x0f" + frame[at + width :]
    code = (
        "import sys\n"
        "from strom.protocol.codec import RequestError, decode_request\n"
        "try:\n"
        f"    decode_request({bad!r})\n"
        "except RequestError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused" in done.stdout
