"""Records to Arrow and back: the read schema, batch building, write column checks."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.spark.arrow import (  # noqa: E402
    BatchBuilder,
    WritePlan,
    arrow_read_schema,
    outgoing_records,
    plan_write,
    read_schema_ddl,
    read_schema_simple,
)
from strom.spark.errors import SchemaError  # noqa: E402


@dataclass
class FakeMessage:
    offset_: int
    key_: bytes | None = b"k"
    value_: bytes | None = b"v"
    timestamp_: tuple[int, int] = (1, 1_700_000_000_123)
    headers_: Any = None

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return self.timestamp_

    def headers(self) -> Any:
        return self.headers_


def kafka_source_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source, field by field (its DDL needs a JVM to parse)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_the_one_spark_expects(include_headers: bool) -> None:
    struct = kafka_source_schema(include_headers)
    assert struct.simpleString() == read_schema_simple(include_headers)
    ddl = (
        "key binary, value binary, topic string, partition int, offset bigint, "
        "timestamp timestamp, timestampType int"
    )
    if include_headers:
        ddl += ", headers array<struct<key:string,value:binary>>"
    assert read_schema_ddl(include_headers) == ddl
    assert to_arrow_schema(struct, timezone="UTC").equals(arrow_read_schema(include_headers))


def test_batch_builder_fills_every_column() -> None:
    builder = BatchBuilder("events", 2, include_headers=True)
    builder.add(FakeMessage(7, headers_=[("h", b"x"), ("n", None)]))
    builder.add(FakeMessage(9, key_=None, value_=None, timestamp_=(2, 5), headers_=[]))
    builder.add(FakeMessage(10, timestamp_=(0, -1)))
    assert len(builder) == 3
    batch = builder.build()
    assert len(builder) == 0
    assert batch.schema.equals(arrow_read_schema(True))
    rows = batch.to_pylist()
    utc = dt.UTC
    assert rows[0] == {
        "key": b"k",
        "value": b"v",
        "topic": "events",
        "partition": 2,
        "offset": 7,
        "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=utc),
        "timestampType": 0,  # CreateTime, as Kafka numbers it
        "headers": [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
    }
    assert (rows[1]["key"], rows[1]["value"], rows[1]["timestampType"]) == (None, None, 1)
    assert rows[1]["headers"] is None  # no headers: null, as Spark's Kafka source gives
    assert (rows[2]["timestamp"], rows[2]["timestampType"]) == (None, -1)


def test_batch_builder_without_headers() -> None:
    builder = BatchBuilder("t", 0, include_headers=False)
    builder.add(FakeMessage(0, headers_=[("h", b"x")]))
    batch = builder.build()
    assert batch.schema.names == [n for n in arrow_read_schema(False).names]
    assert "headers" not in batch.schema.names


def fields(**columns: str) -> list[tuple[str, str]]:
    return list(columns.items())


def test_plan_write_accepts_the_sink_columns() -> None:
    plan = plan_write(
        fields(
            KEY="string",
            value="binary",
            topic="string",
            partition="int",
            headers="array<struct<key:string,value:binary>>",
            timestamp="timestamp",
            offset="bigint",
            timestampType="int",
        ),
        None,
    )
    assert plan.columns["key"] == "KEY"
    assert set(plan.columns) == {"key", "value", "topic", "partition", "headers", "timestamp"}
    assert plan_write(fields(value="string"), "out").topic == "out"


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        ({"key": "string"}, "t", "there is no value column"),
        ({"value": "int"}, "t", "column 'value' is int; it must be binary or string"),
        ({"value": "string"}, None, "no topic: set the option 'topic' or give a topic column"),
        ({"value": "string", "count": "bigint"}, "t", "column 'count' cannot be written"),
        ({"value": "string", "partition": "string"}, "t", "'partition' is string"),
        ({"value": "string", "VALUE": "string"}, "t", "two columns are called 'value'"),
        (
            {"value": "string", "headers": "map<string,string>"},
            "t",
            "it must be array<struct<key:string,value:binary>>",
        ),
    ],
)
def test_plan_write_errors(columns: dict[str, str], topic: str | None, message: str) -> None:
    with pytest.raises(SchemaError) as caught:
        plan_write(list(columns.items()), topic)
    assert message in str(caught.value)


def test_outgoing_records() -> None:
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict(
        {
            "k": pa.array(["a", None]),
            "value": pa.array([b"1", None]),
            "topic": pa.array(["x", None]),
            "partition": pa.array([2, None], pa.int32()),
            "headers": pa.array([[{"key": "h", "value": b"v"}], None], header_type),
            "timestamp": pa.array([1_500_000, None], pa.timestamp("us", tz="UTC")),
        }
    )
    columns = {"key": "k", "value": "value", "topic": "topic", "partition": "partition"}
    plan = WritePlan(columns | {"headers": "headers", "timestamp": "timestamp"}, None)
    assert list(outgoing_records(batch, plan)) == [
        ("x", 2, "a", b"1", [("h", b"v")], 1500),
        (None, None, None, None, None, None),
    ]
    only_value = WritePlan({"value": "value"}, "forced")
    assert [r[0] for r in outgoing_records(batch, only_value)] == ["forced", "forced"]


def test_importing_strom_spark_loads_no_pyspark() -> None:
    code = (
        "import sys, strom, strom.spark, strom.spark.offsets, strom.spark.options;"
        "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules, 'loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
