"""Records to Arrow batches (reading) and Arrow batches to records (writing).

The read schema is the one of Spark's Kafka source. Writes take the columns that sink
takes, plus `timestamp` (the record's create time); the other source columns (`offset`,
`timestampType`) are accepted and ignored, so a DataFrame read from strom can be written
back as it is. No I/O here: consumed messages come in, Arrow batches go out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from strom.spark.errors import SchemaError

READ_COLUMNS = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
)
HEADERS_COLUMN = ("headers", "array<struct<key:string,value:binary>>")
HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
# confluent-kafka's timestamp types -> Kafka's TimestampType ids, as Spark reports them.
TIMESTAMP_TYPE_IDS = {0: -1, 1: 0, 2: 1}

Header = tuple[str, bytes | None]


class Message(Protocol):
    """The part of confluent_kafka.Message a batch is built from."""

    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> Any: ...


def read_columns(include_headers: bool) -> tuple[tuple[str, str], ...]:
    return (*READ_COLUMNS, HEADERS_COLUMN) if include_headers else READ_COLUMNS


def read_schema_ddl(include_headers: bool) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in read_columns(include_headers))


def read_schema_simple(include_headers: bool) -> str:
    """The schema as Spark's StructType.simpleString() spells it."""
    fields = ",".join(f"{name}:{kind}" for name, kind in read_columns(include_headers))
    return f"struct<{fields}>"


def arrow_read_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", pa.list_(HEADER_TYPE)))
    return pa.schema(fields)


class BatchBuilder:
    """The columns of one Arrow batch of one partition's records, filled a record at a time.

    Empty -> (add)* -> build() -> empty again.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_read_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int | None] = []
        self._timestamps_ms: list[int | None] = []
        self._types: list[int] = []
        self._headers: list[list[Header] | None] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, message: Message) -> None:
        kind, timestamp_ms = message.timestamp()
        self._keys.append(message.key())
        self._values.append(message.value())
        self._offsets.append(message.offset())
        self._timestamps_ms.append(timestamp_ms if kind else None)
        self._types.append(TIMESTAMP_TYPE_IDS.get(kind, -1))
        if self.include_headers:
            self._headers.append(message.headers() or None)

    def add_all(self, messages: Sequence[Message]) -> None:
        """Add records in bulk (the fast path: no error events among them)."""
        self._keys += [m.key() for m in messages]
        self._values += [m.value() for m in messages]
        self._offsets += [m.offset() for m in messages]
        stamps = [m.timestamp() for m in messages]
        self._timestamps_ms += [ms if kind else None for kind, ms in stamps]
        self._types += [TIMESTAMP_TYPE_IDS.get(kind, -1) for kind, _ in stamps]
        if self.include_headers:
            self._headers += [m.headers() or None for m in messages]

    def build(self) -> pa.RecordBatch:
        count = len(self._offsets)
        timestamps = pc.multiply(pa.array(self._timestamps_ms, pa.int64()), 1000)
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.array([self.topic] * count, pa.string()),
            pa.array([self.partition] * count, pa.int32()),
            pa.array(self._offsets, pa.int64()),
            timestamps.cast(pa.timestamp("us", tz="UTC")),
            pa.array(self._types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, pa.list_(HEADER_TYPE)))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        return batch


# ---- writing ------------------------------------------------------------------------------

BYTES_TYPES = ("binary", "string")
INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
HEADER_TYPES = ("array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>")
WRITE_TYPES: dict[str, tuple[str, ...]] = {
    "key": BYTES_TYPES,
    "value": BYTES_TYPES,
    "topic": ("string",),
    "partition": INTEGER_TYPES,
    "headers": HEADER_TYPES,
    "timestamp": ("timestamp",),
}
IGNORED_COLUMNS = ("offset", "timestampType")


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Which column holds what, in the DataFrame being written."""

    columns: dict[str, str]  # role ("key", "value", ...) -> the DataFrame's column name
    topic: str | None  # the `topic` option, which wins over a topic column


def plan_write(fields: Sequence[tuple[str, str]], topic_option: str | None) -> WritePlan:
    """Check the DataFrame's (name, type) columns; SchemaError says what is wrong."""
    columns: dict[str, str] = {}
    ignored = {name.lower() for name in IGNORED_COLUMNS}
    for name, kind in fields:
        role = name.lower()
        if role in ignored:
            continue
        if role not in WRITE_TYPES:
            allowed = ", ".join([*WRITE_TYPES, *IGNORED_COLUMNS])
            raise SchemaError(
                f"column {name!r} cannot be written; the columns are {allowed} "
                "(select or rename the ones to write)"
            )
        if role in columns:
            raise SchemaError(f"two columns are called {role!r}")
        if kind not in WRITE_TYPES[role]:
            wanted = " or ".join(WRITE_TYPES[role])
            raise SchemaError(f"column {name!r} is {kind}; it must be {wanted}")
        columns[role] = name
    if "value" not in columns:
        raise SchemaError("there is no value column; a record needs one (string or binary)")
    if "topic" not in columns and topic_option is None:
        raise SchemaError("no topic: set the option 'topic' or give a topic column")
    return WritePlan(columns, topic_option)


# (topic, partition, key, value, headers, timestamp_ms); None where the row has none.
OutgoingRecord = tuple[
    str | None,
    int | None,
    bytes | str | None,
    bytes | str | None,
    list[tuple[str, bytes | str | None]] | None,
    int | None,
]


def outgoing_records(batch: pa.RecordBatch, plan: WritePlan) -> Iterator[OutgoingRecord]:
    """The records one Arrow batch holds, in row order."""
    count = batch.num_rows
    column = plan.columns

    def values(role: str) -> list[Any]:
        if role not in column:
            return [None] * count
        return list(batch.column(column[role]).to_pylist())

    topics = [plan.topic] * count if plan.topic is not None else values("topic")
    headers = values("headers")
    if "headers" in column:
        headers = [None if h is None else [(p["key"], p["value"]) for p in h] for h in headers]
    timestamps: list[Any] = [None] * count
    if "timestamp" in column:
        stamps = batch.column(column["timestamp"]).cast(pa.int64())
        unit = batch.schema.field(column["timestamp"]).type.unit
        if unit == "s":
            stamps = pc.multiply(stamps, 1000)
        elif unit != "ms":
            stamps = pc.divide(stamps, 1000 if unit == "us" else 1_000_000)
        timestamps = stamps.to_pylist()
    return zip(
        topics,
        values("partition"),
        values("key"),
        values("value"),
        headers,
        timestamps,
        strict=True,
    )
