"""Batch reads and writes through the `strom` data source, on a real Spark and a real broker."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

pytest.importorskip("pyspark")

from spark_helpers import consume_all, create_topic, produce, unique_topic

TIMESTAMP_MS = 1_700_000_000_000


def reader(spark: Any, bootstrap: str, **options: str) -> Any:
    read = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        read = read.option(name, value)
    return read


@pytest.fixture(scope="module")
def three_partitions(broker: Any) -> str:
    """10 records in each of 3 partitions: key k<p>, value <p>:<i>, one header, fixed time."""
    topic = create_topic(broker.bootstrap, unique_topic("batch"), 3)
    records = [(p, f"k{p}".encode(), f"{p}:{i}".encode()) for p in range(3) for i in range(10)]
    produce(broker.bootstrap, topic, records, headers=[("h", b"x")], timestamp_ms=TIMESTAMP_MS)
    return topic


def test_batch_read_of_every_record_has_the_kafka_schema(
    spark: Any, bootstrap: str, three_partitions: str
) -> None:
    df = reader(spark, bootstrap, subscribe=three_partitions, includeHeaders="true").load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    assert len(rows) == 30
    first = min(rows, key=lambda r: (r.partition, r.offset))
    assert (first.key, first.value, first.topic, first.partition, first.offset) == (
        b"k0",
        b"0:0",
        three_partitions,
        0,
        0,
    )
    assert first.timestamp == dt.datetime(2023, 11, 14, 22, 13, 20)  # session time zone UTC
    assert first.timestampType == 0
    assert [(h.key, h.value) for h in first.headers] == [("h", b"x")]
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(3) for o in range(10)
    ]


def test_batch_read_with_json_offset_ranges(
    spark: Any, bootstrap: str, three_partitions: str
) -> None:
    topic = three_partitions
    df = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 2, "1": -2, "2": 5}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 7, "1": -1, "2": 6}}}}',
    ).load()
    rows = df.select("partition", "offset", "value").collect()
    expected = [(0, o) for o in range(2, 7)] + [(1, o) for o in range(10)] + [(2, 5)]
    assert sorted((r.partition, r.offset) for r in rows) == expected
    assert all(r.value == f"{r.partition}:{r.offset}".encode() for r in rows)
    assert df.count() == 16


def test_batch_read_by_assign_timestamp_and_split(
    spark: Any, bootstrap: str, three_partitions: str
) -> None:
    topic = three_partitions
    assigned = reader(spark, bootstrap, assign=f'{{"{topic}": [1]}}').load()
    assert {r.partition for r in assigned.collect()} == {1}
    after_all = {"subscribe": topic, "startingTimestamp": str(TIMESTAMP_MS + 1)}
    with pytest.raises(Exception, match="has no record at or after the timestamp"):
        reader(spark, bootstrap, **after_all).load().collect()
    strategy = {"startingOffsetsByTimestampStrategy": "latest"}
    assert reader(spark, bootstrap, **after_all, **strategy).load().count() == 0
    by_time = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": 0, "1": {TIMESTAMP_MS + 1}, "2": 0}}}}',
        startingOffsetsByTimestampStrategy="latest",
    )
    assert by_time.load().count() == 20
    split = reader(spark, bootstrap, subscribe=topic, minPartitions="7").load()
    assert split.rdd.getNumPartitions() >= 7
    assert split.count() == 30
    capped = reader(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="4").load()
    assert capped.rdd.getNumPartitions() == 9  # ceil(10 / 4) per partition
    assert capped.count() == 30


def test_read_option_errors_name_the_option(
    spark: Any, bootstrap: str, three_partitions: str
) -> None:
    topic = three_partitions
    cases = [
        ({"subscribe": topic, "startingOffsets": "latest"}, "'startingOffsets'"),
        ({"subscribe": topic, "maxOffsetsPerTrigger": "5"}, "'maxOffsetsPerTrigger'"),
        ({"subscribe": topic, "endingOffsets": f'{{"{topic}": {{"0": 99}}}}'}, "missing"),
        (
            {"subscribe": topic, "endingOffsets": f'{{"{topic}": {{"0": 99, "1": 1, "2": 1}}}}'},
            f"{topic}-0 ends at 10; it has no offset 99",
        ),
        ({"assign": f'{{"{topic}": [7]}}'}, f"'assign': {topic}-7 does not exist"),
        ({"subscribe": topic, "kafka.no.such.setting": "1"}, "'kafka.no.such.setting'"),
        ({"subscribe": topic, "subscribePattern": "x"}, "give exactly one of subscribe"),
    ]
    for options, fragment in cases:
        with pytest.raises(Exception) as caught:
            reader(spark, bootstrap, **options).load().collect()
        assert fragment in str(caught.value), str(caught.value)[-600:]
    with pytest.raises(Exception, match="the schema of a strom read is fixed"):
        spark.read.format("strom").schema("value string").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("subscribe", topic).load().collect()


def test_batch_write_then_read_back(spark: Any, bootstrap: str) -> None:
    first = create_topic(bootstrap, unique_topic("write-a"), 2)
    second = create_topic(bootstrap, unique_topic("write-b"), 1)
    rows = [
        (f"k{i}", f"v{i}", first if i % 2 else second, i % 2 if i % 2 else None) for i in range(40)
    ]
    df = spark.createDataFrame(rows, "key string, value string, topic string, partition int")
    df = df.selectExpr(
        "key",
        "CAST(value AS BINARY) AS value",
        "topic",
        "partition",
        "array(named_struct('key', 'n', 'value', CAST(value AS BINARY))) AS headers",
        "TIMESTAMP '2024-01-02 03:04:05' AS timestamp",
    )
    df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    got_first = consume_all(bootstrap, first, 2)
    got_second = consume_all(bootstrap, second, 1)
    assert len(got_first) == 20 and len(got_second) == 20
    assert {r.partition for r in got_first} == {1}  # the partition column was honoured
    by_key = {r.key: r for r in got_first + got_second}
    assert by_key[b"k3"].value == b"v3"
    assert by_key[b"k3"].headers == [("n", b"v3")]
    assert by_key[b"k3"].timestamp_ms == 1_704_164_645_000
    # The topic option wins over the topic column, as in Spark's Kafka sink.
    df.drop("partition").write.format("strom").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", second
    ).mode("append").save()
    assert len(consume_all(bootstrap, second, 1)) == 60


def test_bad_rows_fail_clearly(spark: Any, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique_topic("bad-rows"), 2)

    def write(df: Any, **options: str) -> str:
        writer = df.write.format("strom").option("kafka.bootstrap.servers", bootstrap)
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(Exception) as caught:
            writer.mode("append").save()
        return str(caught.value)

    no_value = spark.createDataFrame([("k",)], "key string")
    assert "there is no value column" in write(no_value, topic=topic)
    extra = spark.createDataFrame([("v", 1)], "value string, count int")
    assert "column 'count' cannot be written" in write(extra, topic=topic)
    values = spark.createDataFrame([("v",)], "value string")
    assert "no topic: set the option 'topic'" in write(values)
    assert "cannot write to topic 'no-such-topic'" in write(values, topic="no-such-topic")
    assert "does not exist" in write(values, topic="no-such-topic")
    null_topic = spark.createDataFrame([("v", None)], "value string, topic string")
    assert "has no topic (its topic is null)" in write(null_topic)
    bad_partition = spark.createDataFrame([("v", 5)], "value string, partition int")
    assert f"topic '{topic}' has no partition 5 (it has 2)" in write(bad_partition, topic=topic)
    overwrite = values.write.format("strom").option("kafka.bootstrap.servers", bootstrap)
    with pytest.raises(Exception, match="topics are append-only"):
        overwrite.option("topic", topic).mode("overwrite").save()
    assert consume_all(bootstrap, topic, 2) == []  # nothing of a refused write arrived
