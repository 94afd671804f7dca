"""Data source options: Spark's Kafka names, defaults, and errors that name the option."""

from __future__ import annotations

import pytest

from strom.spark.errors import OptionError
from strom.spark.offsets import (
    Boundary,
    GlobalTimestamp,
    IsolationLevel,
    PartitionTimestamps,
    SpecificOffsets,
    TimestampStrategy,
    TopicPartition,
)
from strom.spark.options import (
    READ_OPTIONS,
    ReaderKind,
    SubscriptionKind,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def lowered(options: dict[str, str]) -> dict[str, str]:
    """As Spark hands them over: names lower-cased."""
    return {k.lower(): v for k, v in options.items()}


def read(streaming: bool = True, **extra: str) -> object:
    return parse_read_options(lowered(BASE | extra), streaming=streaming)


def read_error(streaming: bool = True, base: dict[str, str] | None = None, **extra: str) -> str:
    with pytest.raises(OptionError) as caught:
        parse_read_options(lowered((BASE if base is None else base) | extra), streaming=streaming)
    return str(caught.value)


def test_defaults_follow_spark() -> None:
    stream = parse_read_options(lowered(BASE), streaming=True)
    batch = parse_read_options(lowered(BASE), streaming=False)
    assert stream.starting is Boundary.LATEST
    assert batch.starting is Boundary.EARLIEST
    assert batch.ending is Boundary.LATEST
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_offsets_per_trigger is None
    assert stream.poll_timeout_ms == 120_000
    assert stream.subscription.kind is SubscriptionKind.SUBSCRIBE
    assert stream.subscription.topics == ("events",)
    # Spark's (the Java client's) default, not librdkafka's read_committed.
    assert stream.isolation_level is IsolationLevel.READ_UNCOMMITTED


@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("read_committed", IsolationLevel.READ_COMMITTED),
        ("READ_COMMITTED", IsolationLevel.READ_COMMITTED),
        ("read_uncommitted", IsolationLevel.READ_UNCOMMITTED),
    ],
)
def test_isolation_level_is_the_readers_own(value: str, level: IsolationLevel) -> None:
    for streaming in (True, False):
        options = parse_read_options(
            lowered(BASE | {"kafka.isolation.level": value, "kafka.client.id": "c"}),
            streaming=streaming,
        )
        assert options.isolation_level is level
        assert options.client_config == {"client.id": "c"}  # the reader sets it itself


def test_isolation_level_must_be_a_level() -> None:
    assert read_error(**{"kafka.isolation.level": "committed"}) == (
        "strom: option 'kafka.isolation.level': expected one of read_uncommitted, "
        "read_committed, got 'committed'"
    )


def test_every_option_is_parsed() -> None:
    options = parse_read_options(
        lowered(
            {
                "bootstrap.servers": "h:1",
                "subscribePattern": "ev.*",
                "startingTimestamp": "1000",
                "startingOffsetsByTimestampStrategy": "LATEST",
                "failOnDataLoss": "False",
                "includeHeaders": "true",
                "maxOffsetsPerTrigger": "500",
                "minPartitions": "4",
                "maxRecordsPerPartition": "1000",
                "kafkaConsumer.pollTimeoutMs": "5000",
                "fetchOffset.numRetries": "0",
                "fetchOffset.retryIntervalMs": "10",
                "kafka.security.protocol": "PLAINTEXT",
                "reader": "Consumer",
            }
        ),
        streaming=True,
    )
    assert options.bootstrap_servers == "h:1"
    assert options.subscription.pattern == "ev.*"
    assert options.starting == GlobalTimestamp(1000)
    assert options.starting_option == "startingTimestamp"
    assert options.timestamp_strategy is TimestampStrategy.LATEST
    assert not options.fail_on_data_loss and options.include_headers
    assert options.max_offsets_per_trigger == 500
    assert (options.min_partitions, options.max_records_per_partition) == (4, 1000)
    assert (options.poll_timeout_ms, options.fetch_retries) == (5000, 0)
    assert options.fetch_retry_interval_ms == 10
    assert options.client_config == {"security.protocol": "PLAINTEXT"}
    assert options.reader is ReaderKind.CONSUMER
    assert len(READ_OPTIONS) == 21


OAUTH_UNSECURED = {
    "kafka.security.protocol": "SASL_PLAINTEXT",
    "kafka.sasl.mechanisms": "OAUTHBEARER",
    "kafka.enable.sasl.oauthbearer.unsecure.jwt": "true",
    "kafka.sasl.oauthbearer.config": "principal=Alice scope=read",
}
OAUTH_OIDC = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "OAUTHBEARER",
    "kafka.sasl.oauthbearer.method": "oidc",
    "kafka.sasl.oauthbearer.client.id": "orders",
    "kafka.sasl.oauthbearer.client.secret": "orders-secret",
    "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
}
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@pytest.mark.parametrize(
    ("given", "reader"),
    [
        ({}, ReaderKind.BATCHES),
        ({"kafka.security.protocol": "plaintext"}, ReaderKind.BATCHES),
        ({"kafka.security.protocol": "SSL"}, ReaderKind.BATCHES),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512"},
            ReaderKind.BATCHES,
        ),
        ({"kafka.security.protocol": "SASL_SSL"}, ReaderKind.CONSUMER),  # GSSAPI
        (OAUTH_UNSECURED, ReaderKind.BATCHES),
        (OAUTH_OIDC, ReaderKind.BATCHES),
        (  # a JWT assertion: librdkafka gets such tokens, strom's client does not
            OAUTH_OIDC | {"kafka.sasl.oauthbearer.grant.type": JWT_BEARER},
            ReaderKind.CONSUMER,
        ),
        ({"reader": "batches"}, ReaderKind.BATCHES),
        ({"reader": "consumer"}, ReaderKind.CONSUMER),
        ({"reader": "consumer", "kafka.security.protocol": "SSL"}, ReaderKind.CONSUMER),
    ],
)
def test_the_reader_is_batches_unless_the_login_is_one_strom_has_none_for(
    given: dict[str, str], reader: ReaderKind
) -> None:
    assert parse_read_options(lowered(BASE | given), streaming=False).reader is reader


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"reader": "batches", "kafka.security.protocol": "SASL_SSL"},
            "kafka.sasl.mechanism is 'GSSAPI'; use reader=consumer",
        ),
        ({"reader": "records"}, "expected one of batches, consumer, got 'records'"),
        (
            OAUTH_OIDC | {"reader": "batches", "kafka.sasl.oauthbearer.grant.type": JWT_BEARER},
            "batches cannot log in as kafka.sasl.oauthbearer.grant.type asks .*client_credentials "
            "only.*; use reader=consumer",
        ),
    ],
)
def test_a_reader_that_cannot_read_is_refused(given: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=rf"option 'reader': .*{message}"):
        parse_read_options(lowered(BASE | given), streaming=False)


def test_the_oauthbearer_options_keep_their_values_and_reach_the_client() -> None:
    options = parse_read_options(lowered(BASE | OAUTH_UNSECURED), streaming=False)
    assert options.client_config["sasl.oauthbearer.config"] == "principal=Alice scope=read"
    assert options.client_config["enable.sasl.oauthbearer.unsecure.jwt"] == "true"


@pytest.mark.parametrize(
    ("given", "option", "message"),
    [
        (
            OAUTH_UNSECURED | {"kafka.sasl.oauthbearer.config": "scope=read"},
            "kafka.sasl.oauthbearer.config",
            "has no principal=<name>",
        ),
        (
            {k: v for k, v in OAUTH_OIDC.items() if "secret" not in k},
            "kafka.sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.method=oidc also needs sasl.oauthbearer.client.secret",
        ),
        (
            {k: v for k, v in OAUTH_OIDC.items() if "method" not in k},
            "kafka.sasl.oauthbearer.method",
            "needs a way to get tokens",
        ),
    ],
)
def test_oauthbearer_options_no_client_can_log_in_with_are_refused_by_name(
    given: dict[str, str], option: str, message: str
) -> None:
    for reader in ("batches", "consumer"):
        with pytest.raises(OptionError, match=rf"option '{option}': .*{message}"):
            parse_read_options(lowered(BASE | given | {"reader": reader}), streaming=False)


def test_an_exactly_once_write_needs_a_login_strom_has() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t", "exactlyOnce": "true"}
    assert parse_write_options(lowered(base | OAUTH_UNSECURED), streaming=True).exactly_once
    with pytest.raises(OptionError, match="option 'exactlyOnce': strom's own client ends"):
        parse_write_options(lowered(base | {"kafka.security.protocol": "SASL_SSL"}), streaming=True)
    with pytest.raises(OptionError, match=r"option 'kafka\.sasl\.oauthbearer\.config'"):
        parse_write_options(
            lowered(base | OAUTH_UNSECURED | {"kafka.sasl.oauthbearer.config": ""}),
            streaming=True,
        )


def test_batch_ending_options() -> None:
    options = parse_read_options(
        lowered(BASE | {"endingOffsetsByTimestamp": '{"events": {"0": 9}}'}), streaming=False
    )
    assert options.ending == PartitionTimestamps({TopicPartition("events", 0): 9})
    options = parse_read_options(
        lowered(BASE | {"startingOffsets": '{"events": {"0": -2}}'}), streaming=False
    )
    assert options.starting == SpecificOffsets({TopicPartition("events", 0): -2})


def test_subscriptions() -> None:
    counts = {"a": 2, "b": 1, "__internal": 1, "ab": 1}
    assign = parse_read_options(
        {"bootstrap.servers": "h:1", "assign": '{"a": [1, 0], "b": [3]}'}, streaming=True
    )
    assert assign.subscription.select(counts) == [TopicPartition("a", 0), TopicPartition("a", 1)]
    pattern = parse_read_options(
        {"bootstrap.servers": "h:1", "subscribepattern": "a.*|__.*"}, streaming=True
    )
    assert [str(tp) for tp in pattern.subscription.select(counts)] == ["a-0", "a-1", "ab-0"]
    named = parse_read_options(
        {"bootstrap.servers": "h:1", "subscribe": " b , missing "}, streaming=True
    )
    assert named.subscription.select(counts) == [TopicPartition("b", 0)]
    assert "missing" in named.subscription.describe()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"maxOffsetPerTrigger": "5"}, "'maxoffsetpertrigger': unknown read option; did you mean "),
        ({"topic": "x"}, "'topic': is not an option for reads"),
        ({"subscribePattern": "x"}, "give exactly one of subscribe, subscribePattern, assign"),
        ({"subscribe": " , "}, "'subscribe': expected comma-separated topic names"),
        ({"failOnDataLoss": "yes"}, "'failOnDataLoss': expected true or false, got 'yes'"),
        ({"maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger': expected a positive whole"),
        ({"maxOffsetsPerTrigger": "1e3"}, "'maxOffsetsPerTrigger': expected a positive whole"),
        ({"fetchOffset.numRetries": "-1"}, "'fetchOffset.numRetries': expected a whole number"),
        ({"endingOffsets": "latest"}, "'endingOffsets': applies to batch reads only"),
        (
            {"startingOffsets": "earliest", "startingTimestamp": "5"},
            "'startingTimestamp': contradicts startingOffsets",
        ),
        (
            {"startingOffsetsByTimestampStrategy": "latest"},
            "only applies with startingTimestamp",
        ),
        (
            {"startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "maybe"},
            "expected one of error, latest, got 'maybe'",
        ),
        ({"minOffsetsPerTrigger": "5"}, "'minOffsetsPerTrigger': not supported"),
        ({"maxTriggerDelay": "5m"}, "'maxTriggerDelay': not supported"),
        ({"kafka.group.id": "g"}, "'kafka.group.id': not supported"),
        ({"groupIdPrefix": "g"}, "'groupIdPrefix': not supported"),
        ({"kafka.auto.offset.reset": "earliest"}, "the reader sets auto.offset.reset itself"),
        ({"kafka.enable.auto.commit": "true"}, "the reader sets enable.auto.commit itself"),
        ({"kafka.value.deserializer": "x"}, "is a Java client setting"),
        ({"bootstrap.servers": "other:1"}, "'bootstrap.servers': contradicts"),
        ({"subscribePattern": "(", "subscribe": ""}, "give exactly one"),
    ],
)
def test_stream_option_errors(extra: dict[str, str], message: str) -> None:
    assert message in read_error(True, **extra)


def test_option_errors_outside_the_base() -> None:
    assert "is required" in read_error(base={"subscribe": "x"})
    assert "not a valid regular expression" in read_error(
        base={"bootstrap.servers": "h:1", "subscribePattern": "("}
    )
    assert "expected JSON like" in read_error(base={"bootstrap.servers": "h:1", "assign": "a:0"})
    bad_assign = {"bootstrap.servers": "h:1", "assign": '{"a": [-1]}'}
    assert "is not a partition" in read_error(base=bad_assign)
    assert "got none" in read_error(base={"bootstrap.servers": "h:1"})


def test_batch_only_errors() -> None:
    assert "cannot start at latest" in read_error(False, startingOffsets="latest")
    assert "cannot start at latest" in read_error(False, startingOffsets='{"events": {"0": -1}}')
    assert "'maxOffsetsPerTrigger': applies to streaming reads" in read_error(
        False, maxOffsetsPerTrigger="10"
    )
    assert "'endingOffsets': ending offsets cannot be 'earliest'" in read_error(
        False, endingOffsets="earliest"
    )


def test_write_options() -> None:
    options = parse_write_options(
        lowered({"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.linger.ms": "20"})
    )
    assert (options.bootstrap_servers, options.topic) == ("h:1", "out")
    assert options.client_config == {"linger.ms": "20"}
    # Spark passes the checkpoint location of a streaming query to its sink.
    parse_write_options({"bootstrap.servers": "h:1", "checkpointlocation": "/tmp/x"})
    for bad, message in [
        ({"subscribe": "x"}, "'subscribe': is not an option for writes"),
        ({"topic": " "}, "'topic': is empty"),
        ({"tpoic": "x"}, "did you mean 'topic'?"),
        ({"kafka.transactional.id": "t"}, "the writer sets transactional.id itself"),
        ({"kafka.key.serializer": "x"}, "is a Java client setting"),
    ]:
        with pytest.raises(OptionError) as caught:
            parse_write_options({"bootstrap.servers": "h:1"} | bad)
        assert message in str(caught.value)


def test_exactly_once_write_options() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "topic": "out"}
    stream = parse_write_options(lowered(base | {"exactlyOnce": "true"}), streaming=True)
    assert (stream.exactly_once, stream.transactional_id_prefix) == (True, None)
    batch = parse_write_options(
        lowered(base | {"exactlyOnce": "TRUE", "transactionalIdPrefix": " nightly-copy "})
    )
    assert (batch.exactly_once, batch.transactional_id_prefix) == (True, "nightly-copy")
    assert parse_write_options(lowered(base)).exactly_once is False
    # Transactions need idempotence and acks=all; saying so is fine.
    parse_write_options(lowered(base | {"exactlyOnce": "true", "kafka.acks": "-1"}), streaming=True)
    for streaming, bad, message in [
        (False, {"exactlyOnce": "true"}, "'transactionalIdPrefix': a batch write with"),
        (True, {"exactlyOnce": "yes"}, "'exactlyOnce': expected true or false"),
        (True, {"transactionalIdPrefix": "p"}, "only applies with exactlyOnce=true"),
        (
            True,
            {"exactlyOnce": "true", "transactionalIdPrefix": "p", "kafka.acks": "1"},
            "'kafka.acks': exactlyOnce needs transactions, which need acks=all",
        ),
        (
            True,
            {"exactlyOnce": "true", "kafka.enable.idempotence": "false"},
            "which need enable.idempotence=true",
        ),
        (True, {"exactlyOnce": "true", "transactionalIdPrefix": " "}, "printable characters"),
        (True, {"exactlyOnce": "true", "transactionalIdPrefix": "x" * 201}, "1 to 200"),
        (True, {"exactlyonce": "true", "kafka.transactional.id": "t"}, "sets transactional.id"),
        (True, {"exactlyOnse": "true"}, "did you mean 'exactlyOnce'?"),
    ]:
        with pytest.raises(OptionError) as caught:
            parse_write_options(lowered(base | bad), streaming=streaming)
        assert message in str(caught.value)
