"""The options of the `strom` data source, named as in Spark's Kafka source, checked up front.

Pure. Spark hands options over with lower-cased names; every message here uses the name
as documented. An unknown option, a malformed value or two options that contradict each
other raise OptionError naming the option. `kafka.*` options go to the client
(librdkafka names), except the few the connector must own.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from strom.spark.errors import OptionError
from strom.spark.exactly_once import MAX_PREFIX_CHARS
from strom.spark.offsets import (
    Boundary,
    IsolationLevel,
    OffsetRequest,
    Side,
    SpecificOffsets,
    TimestampStrategy,
    TopicPartition,
    parse_offsets,
    parse_partition_timestamps,
    parse_timestamp,
)

BOOTSTRAP = ("kafka.bootstrap.servers", "bootstrap.servers")
ISOLATION_LEVEL = "kafka.isolation.level"  # a client setting the reader plans by
STARTING = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
ENDING = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
SUBSCRIPTION = ("subscribe", "subscribePattern", "assign")

READ_OPTIONS = (
    *BOOTSTRAP,
    *SUBSCRIPTION,
    *STARTING,
    "startingOffsetsByTimestampStrategy",
    *ENDING,
    "failOnDataLoss",
    "includeHeaders",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "maxRecordsPerPartition",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "reader",
)
# checkpointLocation is passed to sinks by Spark itself.
WRITE_OPTIONS = (
    *BOOTSTRAP,
    "topic",
    "checkpointLocation",
    "exactlyOnce",
    "transactionalIdPrefix",
)

# Options of Spark's Kafka source that strom refuses, and why.
NOT_SUPPORTED = {
    "minOffsetsPerTrigger": "Python data sources take a single read limit; "
    "use maxOffsetsPerTrigger",
    "maxTriggerDelay": "it only works with minOffsetsPerTrigger, which strom does not take",
    "groupIdPrefix": "strom's source reads without a consumer group",
    "kafka.group.id": "strom's source reads without a consumer group and commits nothing",
}
# librdkafka settings the reader or writer sets itself.
OWNED_BY_READER = {
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "enable.partition.eof",
}
OWNED_BY_WRITER = {"transactional.id"}
JAVA_ONLY = {
    "key.deserializer",
    "value.deserializer",
    "key.serializer",
    "value.serializer",
    "interceptor.classes",
}
E = TypeVar("E", bound=Enum)
_ROLE = {"read": "reader", "write": "writer"}

DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_FETCH_RETRIES = 3
DEFAULT_FETCH_RETRY_INTERVAL_MS = 1_000


class ReaderKind(Enum):
    """How read tasks read: whole record batches with strom's own client (TLS, SASL/PLAIN,
    SCRAM and OAUTHBEARER too), or records one by one through a librdkafka consumer."""

    BATCHES = "batches"
    CONSUMER = "consumer"


class SubscriptionKind(Enum):
    SUBSCRIBE = "subscribe"
    PATTERN = "subscribePattern"
    ASSIGN = "assign"


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions a query reads: named topics, topics matching a regex, or a fixed list."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions this subscription covers among existing topics (name -> count)."""
        if self.kind is SubscriptionKind.ASSIGN:
            return sorted(
                tp for tp in self.assigned if tp.partition < partition_counts.get(tp.topic, 0)
            )
        if self.kind is SubscriptionKind.SUBSCRIBE:
            topics = [t for t in self.topics if t in partition_counts]
        else:
            regex = re.compile(self.pattern)
            topics = [t for t in partition_counts if not t.startswith("__") and regex.fullmatch(t)]
        return sorted(TopicPartition(t, p) for t in topics for p in range(partition_counts[t]))

    def describe(self) -> str:
        if self.kind is SubscriptionKind.ASSIGN:
            return "assign " + ", ".join(map(str, self.assigned))
        if self.kind is SubscriptionKind.PATTERN:
            return f"subscribePattern {self.pattern!r}"
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetRequest
    starting_option: str
    ending: OffsetRequest
    ending_option: str
    timestamp_strategy: TimestampStrategy = TimestampStrategy.ERROR
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_retries: int = DEFAULT_FETCH_RETRIES
    fetch_retry_interval_ms: int = DEFAULT_FETCH_RETRY_INTERVAL_MS
    # kafka.isolation.level: read_uncommitted by default, as in Spark's Kafka source
    # (librdkafka's own default is read_committed); not in client_config.
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    client_config: Mapping[str, str] = field(default_factory=dict)
    reader: ReaderKind = ReaderKind.BATCHES


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    client_config: Mapping[str, str] = field(default_factory=dict)
    exactly_once: bool = False
    # With exactly_once: the prefix of the tasks' transactional ids; None in a stream means
    # "from the query's id", which Spark keeps in the checkpoint.
    transactional_id_prefix: str | None = None


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every option of a read; `streaming` says whether it is readStream."""
    given = _canonical(options, READ_OPTIONS, "read", OWNED_BY_READER)
    bootstrap = _bootstrap(given)
    subscription = _subscription(given)
    starting_option, starting = _starting(given, streaming)
    ending_option, ending = _ending(given, streaming)
    strategy_name = "startingOffsetsByTimestampStrategy"
    strategy = TimestampStrategy.ERROR
    if strategy_name in given:
        if starting_option not in ("startingTimestamp", "startingOffsetsByTimestamp"):
            raise OptionError(
                strategy_name, "only applies with startingTimestamp or startingOffsetsByTimestamp"
            )
        strategy = _choice(strategy_name, given[strategy_name], TimestampStrategy)
    max_per_trigger = _positive(given, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        raise OptionError("maxOffsetsPerTrigger", "applies to streaming reads (readStream) only")
    client_config = {
        key: value
        for key, value in _client_config(given).items()
        if key != ISOLATION_LEVEL.removeprefix("kafka.")
    }
    return ReadOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        starting_option=starting_option,
        ending=ending,
        ending_option=ending_option,
        timestamp_strategy=strategy,
        fail_on_data_loss=_boolean(given, "failOnDataLoss", default=True),
        include_headers=_boolean(given, "includeHeaders", default=False),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive(given, "minPartitions"),
        max_records_per_partition=_positive(given, "maxRecordsPerPartition"),
        poll_timeout_ms=_positive(given, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        fetch_retries=_count(given, "fetchOffset.numRetries", DEFAULT_FETCH_RETRIES),
        fetch_retry_interval_ms=_count(
            given, "fetchOffset.retryIntervalMs", DEFAULT_FETCH_RETRY_INTERVAL_MS
        ),
        isolation_level=_isolation_level(given),
        client_config=client_config,
        reader=_reader(given, client_config),
    )


def _reader(given: Mapping[str, str], client_config: Mapping[str, str]) -> ReaderKind:
    """`reader`; by default batches, unless the client must log in in a way strom's
    client cannot (GSSAPI; OAUTHBEARER through a JWT assertion or a cloud's metadata
    service), which only the consumer reader (librdkafka) can."""
    problem = _own_login_problem(client_config)
    if "reader" not in given:
        return ReaderKind.BATCHES if problem is None else ReaderKind.CONSUMER
    reader = _choice("reader", given["reader"], ReaderKind)
    if reader is ReaderKind.BATCHES and problem is not None:
        raise OptionError("reader", f"batches {problem}; use reader=consumer")
    return reader


def _own_login_problem(client_config: Mapping[str, str]) -> str | None:
    """Why strom's client cannot log in as the kafka.* options say, as the end of a
    sentence about it (None: it can); OptionError for OAUTHBEARER options that no
    client can log in with."""
    from strom.client.oauth_settings import (
        OAuthBearerSettingError,
        OAuthBearerUnsupported,
        oauthbearer_login,
    )
    from strom.client.security import CLIENT_SASL_MECHANISMS

    protocol = client_config.get("security.protocol", "plaintext").strip().upper()
    if not protocol.startswith("SASL"):
        return None
    mechanism = (
        client_config.get("sasl.mechanism", client_config.get("sasl.mechanisms", "GSSAPI"))
        .strip()
        .upper()
    )
    if mechanism not in CLIENT_SASL_MECHANISMS:
        return (
            f"logs in with {', '.join(CLIENT_SASL_MECHANISMS)}, and "
            f"kafka.sasl.mechanism is {mechanism!r}"
        )
    if mechanism != "OAUTHBEARER":
        return None
    try:
        oauthbearer_login(client_config)
    except OAuthBearerUnsupported as exc:
        return f"cannot log in as kafka.{exc.key} asks ({exc})"
    except OAuthBearerSettingError as exc:
        raise OptionError(f"kafka.{exc.key}", str(exc)) from None
    return None


def _isolation_level(given: Mapping[str, str]) -> IsolationLevel:
    """kafka.isolation.level, case-insensitive as the Java client takes it."""
    if ISOLATION_LEVEL not in given:
        return IsolationLevel.READ_UNCOMMITTED
    return _choice(ISOLATION_LEVEL, given[ISOLATION_LEVEL], IsolationLevel)


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
    """Check every option of a write; `streaming` says whether it is writeStream."""
    given = _canonical(options, WRITE_OPTIONS, "write", OWNED_BY_WRITER)
    topic = given.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("topic", "is empty")
    client_config = _client_config(given)
    exactly_once = _boolean(given, "exactlyOnce", default=False)
    problem = _own_login_problem(client_config) if exactly_once else None
    if problem is not None:
        raise OptionError(
            "exactlyOnce", f"strom's own client ends the transactions, and it {problem}"
        )
    prefix = _transactional_id_prefix(given, exactly_once, streaming, client_config)
    return WriteOptions(_bootstrap(given), topic, client_config, exactly_once, prefix)


def _transactional_id_prefix(
    given: Mapping[str, str], exactly_once: bool, streaming: bool, client_config: Mapping[str, str]
) -> str | None:
    name = "transactionalIdPrefix"
    prefix = given.get(name)
    if not exactly_once:
        if prefix is not None:
            raise OptionError(name, "only applies with exactlyOnce=true")
        return None
    required = {"enable.idempotence": ("true",), "acks": ("all", "-1")}
    for key, wanted in required.items():
        value = client_config.get(key)
        if value is not None and value.strip().lower() not in wanted:
            raise OptionError(
                f"kafka.{key}", f"exactlyOnce needs transactions, which need {key}={wanted[0]}"
            )
    if prefix is None:
        if not streaming:
            raise OptionError(
                name,
                "a batch write with exactlyOnce=true needs one: the same prefix for every "
                "run of the same job (a run again skips what an earlier run committed), a "
                "new one for a new job",
            )
        return None
    prefix = prefix.strip()
    if not prefix or len(prefix) > MAX_PREFIX_CHARS or not prefix.isprintable():
        raise OptionError(
            name, f"expected 1 to {MAX_PREFIX_CHARS} printable characters, got {given[name]!r}"
        )
    return prefix


def _canonical(
    options: Mapping[str, str], known: tuple[str, ...], direction: str, owned: set[str]
) -> dict[str, str]:
    """The options under their documented names; anything unknown or refused raises."""
    names = {name.lower(): name for name in known}
    refused = {name.lower(): (name, why) for name, why in NOT_SUPPORTED.items()}
    other = READ_OPTIONS if direction == "write" else WRITE_OPTIONS
    other_names = {name.lower(): name for name in other} | {"topic": "topic"}
    result: dict[str, str] = {}
    for raw_key, value in options.items():
        key = raw_key.lower()
        if key in refused and direction == "read":
            name, why = refused[key]
            raise OptionError(name, f"not supported: {why}")
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            client_key = key.removeprefix("kafka.")
            if client_key in owned:
                raise OptionError(raw_key, f"the {_ROLE[direction]} sets {client_key} itself")
            if client_key in JAVA_ONLY:
                raise OptionError(raw_key, "is a Java client setting; keys and values are bytes")
            result[key] = str(value)
        elif key in names:
            result[names[key]] = str(value)
        elif key in other_names:
            raise OptionError(other_names[key], f"is not an option for {direction}s")
        else:
            close = difflib.get_close_matches(key, list(names), n=1)
            hint = f"; did you mean {names[close[0]]!r}?" if close else ""
            known_list = ", ".join(known)
            raise OptionError(raw_key, f"unknown {direction} option{hint} (known: {known_list})")
    return result


def _bootstrap(given: Mapping[str, str]) -> str:
    values = {name: given[name].strip() for name in BOOTSTRAP if name in given}
    if not values:
        raise OptionError("kafka.bootstrap.servers", "is required (host:port of a broker)")
    if len(set(values.values())) > 1:
        raise OptionError(
            "bootstrap.servers", "contradicts kafka.bootstrap.servers; give one of them"
        )
    servers = next(iter(values.values()))
    if not servers:
        raise OptionError(next(iter(values)), "is empty")
    return servers


def _subscription(given: Mapping[str, str]) -> Subscription:
    chosen = [name for name in SUBSCRIPTION if name in given]
    if len(chosen) != 1:
        which = " and ".join(chosen) if chosen else "none"
        raise OptionError(
            chosen[-1] if chosen else "subscribe",
            f"give exactly one of subscribe, subscribePattern, assign (got {which})",
        )
    name = chosen[0]
    text = given[name]
    if name == "subscribe":
        topics = tuple(t.strip() for t in text.split(","))
        if not all(topics):
            raise OptionError(name, f"expected comma-separated topic names, got {text!r}")
        return Subscription(SubscriptionKind.SUBSCRIBE, topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise OptionError(name, f"not a valid regular expression: {exc}") from None
        return Subscription(SubscriptionKind.PATTERN, pattern=text)
    return Subscription(SubscriptionKind.ASSIGN, assigned=_assignment(name, text))


def _assignment(name: str, text: str) -> tuple[TopicPartition, ...]:
    example = '{"topic": [0, 1]}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(name, f"expected JSON like {example}: {exc}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(name, f"expected a non-empty JSON object like {example}")
    assigned: set[TopicPartition] = set()
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not partitions:
            raise OptionError(name, f"topic {topic!r} needs a list of partitions, like {example}")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise OptionError(name, f"{partition!r} in topic {topic!r} is not a partition")
            assigned.add(TopicPartition(topic, partition))
    return tuple(sorted(assigned))


def _starting(given: Mapping[str, str], streaming: bool) -> tuple[str, OffsetRequest]:
    name = _at_most_one(given, STARTING)
    if name is None:
        return "startingOffsets", Boundary.LATEST if streaming else Boundary.EARLIEST
    request = _request(name, given[name], Side.START)
    if not streaming:
        latest = request is Boundary.LATEST or (
            isinstance(request, SpecificOffsets) and -1 in request.offsets.values()
        )
        if latest:
            raise OptionError(name, "a batch read cannot start at latest (it would be empty)")
    return name, request


def _ending(given: Mapping[str, str], streaming: bool) -> tuple[str, OffsetRequest]:
    name = _at_most_one(given, ENDING)
    if name is None:
        return "endingOffsets", Boundary.LATEST
    if streaming:
        raise OptionError(name, "applies to batch reads only; a stream has no end")
    return name, _request(name, given[name], Side.END)


def _request(name: str, text: str, side: Side) -> OffsetRequest:
    if name.endswith("ByTimestamp"):
        return parse_partition_timestamps(name, text)
    if name.endswith("Offsets"):
        return parse_offsets(name, text, side)
    return parse_timestamp(name, text)


def _at_most_one(given: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    chosen = [name for name in names if name in given]
    if len(chosen) > 1:
        raise OptionError(chosen[1], f"contradicts {chosen[0]}; give only one of them")
    return chosen[0] if chosen else None


def _boolean(given: Mapping[str, str], name: str, *, default: bool) -> bool:
    if name not in given:
        return default
    text = given[name].strip().lower()
    if text not in ("true", "false"):
        raise OptionError(name, f"expected true or false, got {given[name]!r}")
    return text == "true"


def _positive(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    text = given[name].strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise OptionError(name, f"expected a positive whole number, got {given[name]!r}")
    return int(text)


def _count(given: Mapping[str, str], name: str, default: int) -> int:
    if name not in given:
        return default
    text = given[name].strip()
    if not (text.isascii() and text.isdigit()):
        raise OptionError(name, f"expected a whole number >= 0, got {given[name]!r}")
    return int(text)


def _choice(name: str, text: str, choices: type[E]) -> E:
    word = text.strip().lower()
    for choice in choices:
        if choice.value == word:
            return choice
    allowed = ", ".join(str(c.value) for c in choices)
    raise OptionError(name, f"expected one of {allowed}, got {text!r}")


def _client_config(given: Mapping[str, str]) -> dict[str, str]:
    return {
        key.removeprefix("kafka."): value
        for key, value in given.items()
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers"
    }
