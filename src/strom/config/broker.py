"""The broker's typed configuration.

`load_config` reads a Kafka-style `server.properties` text, then `--set key=value`
overrides, then the CLI's shortcut options (later wins), checks every value and the keys
against each other, and returns a frozen BrokerConfig. A single-node Kafka config in KRaft
combined mode starts strom as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType

from strom.config.consumer_group import consumer_group_config, share_group_config
from strom.config.errors import ConfigError, ConfigSource
from strom.config.group_configs import check_group_broker_keys
from strom.config.keys import CONFIG_KEYS, CONFIG_KEYS_BY_NAME
from strom.config.listener_settings import (
    LISTENER_PREFIX,
    connection_limits,
    ignored_overrides,
    listener_sasl,
    listener_tls,
    split_listener_keys,
)
from strom.config.listener_setup import ListenerSetup
from strom.config.listeners import (
    Endpoint,
    Listener,
    QuorumVoter,
    format_host_port,
    parse_endpoint,
    parse_host_port,
    parse_voter,
)
from strom.config.node_links import NodeLinks, node_links
from strom.config.properties import parse_properties
from strom.config.schema import ConfigValue, format_value, invalid_value, unknown_key
from strom.config.security_keys import SaslSettings, TlsSettings
from strom.config.share_coordinator import ShareCoordinatorSettings, share_coordinator_settings
from strom.config.typed_values import TypedValues
from strom.config.zookeeper import ZooKeeperConnect, parse_zookeeper_connect
from strom.group.consumer.heartbeat import ConsumerGroupConfig
from strom.group.share.heartbeat import ShareGroupConfig
from strom.security.authorizer import (
    AUTHORIZER_CLASS_NAMES,
    is_authorizer_class,
    parse_super_users,
)
from strom.security.connection_quotas import ConnectionLimits

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NO_LAYERS: Mapping[str, int] = MappingProxyType({})
_NO_SOURCES: Mapping[str, ConfigSource] = MappingProxyType({})
_FILE, _SET, _SHORTCUT, DYNAMIC_LAYER = 0, 1, 2, 3


class ProcessRole(Enum):
    """One of the roles `process.roles` lists."""

    BROKER = "broker"
    CONTROLLER = "controller"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Typed broker configuration; see strom.config.keys for what each key means."""

    node_id: int
    process_roles: frozenset[ProcessRole]
    cluster_name: str
    broker_rack: str | None
    metrics_listener: tuple[str, int] | None
    """HOST:PORT of the HTTP endpoint for /metrics, /health and /ready; None: none."""
    listeners: tuple[Listener, ...]
    client_listeners: tuple[Listener, ...]
    controller_listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    """One per client listener, in the same order."""
    controller_listener_names: tuple[str, ...]
    inter_broker_listener_name: str | None
    """A client listener's name; None on a controller-only node."""
    listener_protocols: tuple[tuple[str, str], ...]
    """(listener name, security protocol) of every listener."""
    listener_tls: tuple[tuple[str, TlsSettings], ...]
    """(listener name, its TLS settings) of every SSL and SASL_SSL listener."""
    listener_sasl: tuple[tuple[str, SaslSettings], ...]
    """(listener name, its SASL settings) of every SASL_PLAINTEXT and SASL_SSL listener."""
    node_links: NodeLinks
    """How this node secures its connections to the brokers and to the controllers."""
    connection_limits: ConnectionLimits
    """max.connections and its kin, the client listeners' overrides included."""
    controller_quorum_voters: tuple[QuorumVoter, ...]
    controller_quorum_bootstrap_servers: tuple[Endpoint, ...]
    controller_quorum_election_timeout_ms: int
    controller_quorum_election_backoff_max_ms: int
    controller_quorum_fetch_timeout_ms: int
    zookeeper: ZooKeeperConnect | None
    """Set by zookeeper.connect: the metadata lives in ZooKeeper, not in the Raft quorum."""
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    initial_broker_registration_timeout_ms: int
    log_dir: Path
    metadata_log_dir: Path
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_retention_ms: int
    """-1: kept forever."""
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_cleanup_policy: tuple[str, ...]
    log_message_timestamp_type: str
    """"CreateTime" or "LogAppendTime"."""
    message_max_bytes: int
    compression_type: str
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_backoff_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    socket_request_max_bytes: int
    connections_max_idle_ms: int
    quota_windows: tuple[int, int]
    """Client quotas' (quota.window.num, quota.window.size.seconds in ms)."""
    controller_quota_windows: tuple[int, int]
    """controller_mutation_rate's (controller.quota.window.num, its size in ms)."""
    max_incremental_fetch_session_cache_slots: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_retention_ms: int
    offsets_retention_check_interval_ms: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    consumer_group: ConsumerGroupConfig  # group.consumer.*: KIP-848 consumer groups
    share_coordinator: ShareCoordinatorSettings  # share.coordinator.*
    share_group: ShareGroupConfig  # group.share.*: KIP-932 share groups' membership
    share_group_enable: bool  # group.share.enable: whether share groups are served
    offsets_topic_segment_bytes: int
    offset_metadata_max_bytes: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_max_timeout_ms: int
    transaction_partition_verification_enable: bool
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    authorizer: AuthorizerSettings | None
    """ACLs: set by authorizer.class.name; None: every request is allowed."""
    raw: Mapping[str, str]
    """Effective text of every known key that has a value (defaults included); keys that
    are unset and have no default (e.g. log.retention.ms) are absent."""
    sources: Mapping[str, ConfigSource]
    """For every key in `raw`: STATIC_BROKER_CONFIG (file, --set, shortcut), DEFAULT_CONFIG,
    or, after `with_dynamic`, DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG."""
    listener_keys: Mapping[str, tuple[str, ConfigSource]]
    """Every `listener.name.<listener>.<key>` set, statically or (after `with_dynamic`)
    dynamically: its text as given and its source, as DescribeConfigs lists it."""
    values: Mapping[str, ConfigValue]
    """Typed value of every known key, None where unset."""
    ignored: tuple[str, ...]
    """Keys the user set that strom accepts but that have no effect."""
    given: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """The text of every key set statically (file, --set, shortcuts), as given."""
    given_layers: Mapping[str, int] = field(default_factory=lambda: _NO_LAYERS)
    """Which static layer set each key of `given` (file 0, --set 1, shortcut 2)."""
    dynamic_problems: tuple[str, ...] = ()
    """Stored dynamic configs `with_dynamic` skipped, each with the reason."""

    @property
    def is_broker(self) -> bool:
        return ProcessRole.BROKER in self.process_roles

    @property
    def is_controller(self) -> bool:
        return ProcessRole.CONTROLLER in self.process_roles

    def with_dynamic(
        self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]
    ) -> BrokerConfig:
        """This static config with the dynamic broker configs of the metadata image applied:
        per-broker dynamic > cluster-default dynamic > static (file, --set) > default, as in
        Kafka. A stored value that is invalid (or a key that is not dynamic) is skipped and
        named in `dynamic_problems`; this never raises."""
        from strom.config.dynamic import apply_dynamic  # dynamic.py builds on this module

        return apply_dynamic(self, cluster_default, per_broker)


def load_config(
    *,
    file_text: str | None = None,
    overrides: Sequence[str] = (),
    shortcuts: Mapping[str, str] = _EMPTY,
) -> BrokerConfig:
    """The config from a properties file's text, then `--set key=value` strings, then the
    CLI's shortcut options already turned into keys (see `shortcut_overrides`); a later
    value for the same key wins. Raises ConfigError naming the key on any problem."""
    given: dict[str, str] = {}
    layers: dict[str, int] = {}
    if file_text is not None:
        for name, text in parse_properties(file_text).items():
            given[name], layers[name] = text, _FILE
    for item in overrides:
        name, separator, text = item.partition("=")
        name = name.strip()
        if not separator or not name:
            raise ConfigError(
                f"invalid --set {item!r}: expected key=value, e.g. --set num.partitions=3",
                key=name or None,
            )
        given.pop(name, None)  # keep the order of the last assignment
        given[name], layers[name] = text, _SET
    for name, text in shortcuts.items():
        given.pop(name, None)
        given[name], layers[name] = text, _SHORTCUT
    return build_config(given, layers)


def shortcut_overrides(
    data_dir: str | None = None,
    listen: str | None = None,
    node_id: int | None = None,
    metrics: str | None = None,
) -> dict[str, str]:
    """The keys the CLI's `--data-dir DIR`, `--listen HOST:PORT`, `--node-id N` and
    `--metrics HOST:PORT` stand for."""
    result: dict[str, str] = {}
    if metrics is not None:
        host, port = parse_host_port(metrics, key="--metrics", allow_empty_host=True)
        result["metrics.listener"] = format_host_port(host, port)
    if data_dir is not None:
        if not data_dir.strip() or "," in data_dir:
            raise invalid_value("--data-dir", data_dir, "expected one directory")
        result["log.dirs"] = data_dir
    if listen is not None:
        host, port = parse_host_port(listen, key="--listen", allow_empty_host=True)
        result["listeners"] = f"PLAINTEXT://{format_host_port(host, port)}"
        # The address clients are told must follow, or a --config file's
        # advertised.listeners would send them to the old port.
        advertised_host = host if host not in ("", "0.0.0.0", "::") else "localhost"
        result["advertised.listeners"] = f"PLAINTEXT://{format_host_port(advertised_host, port)}"
    if node_id is not None:
        if node_id < 0 or node_id > 2**31 - 1:
            raise invalid_value("--node-id", str(node_id), "must be from 0 to 2147483647")
        result["node.id"] = str(node_id)
    return result


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """The authorizer's settings: `super.users` and `allow.everyone.if.no.acl.found`."""

    super_users: frozenset[str]
    allow_if_no_acl: bool


def _authorizer(v: TypedValues) -> AuthorizerSettings | None:
    class_name = v.string("authorizer.class.name").strip()
    if not class_name:
        return None
    if not is_authorizer_class(class_name):
        raise invalid_value(
            "authorizer.class.name",
            class_name,
            f"strom's authorizer is named by {' or '.join(AUTHORIZER_CLASS_NAMES)}",
        )
    text = v.string("super.users")
    try:
        super_users = parse_super_users(text)
    except ValueError as exc:
        raise invalid_value("super.users", text, str(exc)) from None
    return AuthorizerSettings(super_users, v.boolean("allow.everyone.if.no.acl.found"))


def _metrics_listener(v: TypedValues) -> tuple[str, int] | None:
    text = v.optional_string("metrics.listener")
    if not text:
        return None
    return parse_host_port(text, key="metrics.listener", allow_empty_host=True)


def build_config(
    given: Mapping[str, str],
    layers: Mapping[str, int],
    dynamic_sources: Mapping[str, ConfigSource] = _NO_SOURCES,
) -> BrokerConfig:
    """The config from key texts; `layers` says who set each (`DYNAMIC_LAYER`: a dynamic
    config, whose source `dynamic_sources` gives)."""
    plain, overrides = split_listener_keys(given)
    for name in plain:
        if name not in CONFIG_KEYS_BY_NAME:
            raise unknown_key(name, tuple(CONFIG_KEYS_BY_NAME))
    typed: dict[str, ConfigValue] = {}
    raw: dict[str, str] = {}
    sources: dict[str, ConfigSource] = {}
    for key in CONFIG_KEYS:
        text = plain.get(key.name, key.default)
        if text is None or (key.default is None and not text.strip()):
            typed[key.name] = None
            continue
        value = key.parse(text)
        typed[key.name] = value
        raw[key.name] = format_value(value) or ""
        sources[key.name] = (
            dynamic_sources.get(key.name, ConfigSource.STATIC_BROKER_CONFIG)
            if key.name in plain
            else ConfigSource.DEFAULT_CONFIG
        )
    v = TypedValues(typed)

    roles = _roles(v)
    is_broker, is_controller = ProcessRole.BROKER in roles, ProcessRole.CONTROLLER in roles
    voters = _voters(v)
    bootstrap = tuple(
        parse_endpoint(text, key="controller.quorum.bootstrap.servers")
        for text in v.strings("controller.quorum.bootstrap.servers")
    )
    both_roles, zk = roles == frozenset(ProcessRole), v.optional_string("zookeeper.connect")
    zookeeper = parse_zookeeper_connect(zk, plain, both_roles, voters, bootstrap)
    single_node = zookeeper is None and both_roles and len(voters) <= 1 and len(bootstrap) <= 1
    node_id = _node_id(v, plain, layers, single_node=single_node)
    for name in ("node.id", "broker.id"):
        raw[name] = str(node_id)
        given_either = "node.id" in plain or "broker.id" in plain
        sources[name] = (
            ConfigSource.STATIC_BROKER_CONFIG if given_either else ConfigSource.DEFAULT_CONFIG
        )
    if is_controller and voters and node_id not in {voter.node_id for voter in voters}:
        raise ConfigError(
            f"node.id {node_id} is not in 'controller.quorum.voters' "
            f"({','.join(str(voter.node_id) for voter in voters)}), "
            "but process.roles makes this node a controller",
            key="controller.quorum.voters",
        )
    if is_broker and not is_controller and not voters and not bootstrap:
        raise ConfigError(
            "process.roles=broker needs 'controller.quorum.voters' or "
            "'controller.quorum.bootstrap.servers' to find the controllers",
            key="controller.quorum.voters",
        )
    listeners = ListenerSetup.build(
        v,
        plain,
        is_broker=is_broker,
        is_controller=is_controller,
        single_node=single_node or zookeeper is not None,
    )
    all_tls = listener_tls(listeners, v, overrides)
    served = {listener.name for listener in listeners.listeners}
    sasl = listener_sasl(listeners, v, overrides)
    log_dir = _log_dir(v)
    metadata_log_dir = v.optional_string("metadata.log.dir")
    group_min_ms = v.integer("group.min.session.timeout.ms")
    group_max_ms = v.integer("group.max.session.timeout.ms")
    if group_min_ms > group_max_ms:
        raise invalid_value(
            "group.min.session.timeout.ms",
            str(group_min_ms),
            f"must not exceed group.max.session.timeout.ms ({group_max_ms})",
        )
    check_group_broker_keys(raw)
    return BrokerConfig(
        node_id=node_id,
        process_roles=roles,
        cluster_name=v.string("cluster.name"),
        broker_rack=v.optional_string("broker.rack") or None,
        metrics_listener=_metrics_listener(v),
        listeners=listeners.listeners,
        client_listeners=listeners.client,
        controller_listeners=listeners.controller,
        advertised_listeners=listeners.advertised,
        controller_listener_names=listeners.controller_names,
        inter_broker_listener_name=listeners.inter_broker_name,
        listener_protocols=listeners.protocols,
        listener_tls=tuple((name, tls) for name, tls in all_tls if name in served),
        listener_sasl=sasl,
        node_links=node_links(
            listeners, v, overrides, dict(all_tls), dict(sasl), zookeeper=zookeeper is not None
        ),
        connection_limits=connection_limits(listeners, v, overrides),
        controller_quorum_voters=voters,
        controller_quorum_bootstrap_servers=bootstrap,
        controller_quorum_election_timeout_ms=v.integer("controller.quorum.election.timeout.ms"),
        controller_quorum_election_backoff_max_ms=v.integer(
            "controller.quorum.election.backoff.max.ms"
        ),
        controller_quorum_fetch_timeout_ms=v.integer("controller.quorum.fetch.timeout.ms"),
        zookeeper=zookeeper,
        zookeeper_session_timeout_ms=v.integer("zookeeper.session.timeout.ms"),
        zookeeper_connection_timeout_ms=v.optional_integer("zookeeper.connection.timeout.ms")
        or v.integer("zookeeper.session.timeout.ms"),
        broker_heartbeat_interval_ms=v.integer("broker.heartbeat.interval.ms"),
        broker_session_timeout_ms=v.integer("broker.session.timeout.ms"),
        initial_broker_registration_timeout_ms=v.integer("initial.broker.registration.timeout.ms"),
        log_dir=log_dir,
        metadata_log_dir=Path(metadata_log_dir) if metadata_log_dir else log_dir,
        num_partitions=v.integer("num.partitions"),
        default_replication_factor=v.integer("default.replication.factor"),
        auto_create_topics_enable=v.boolean("auto.create.topics.enable"),
        delete_topic_enable=v.boolean("delete.topic.enable"),
        log_segment_bytes=v.integer("log.segment.bytes"),
        log_roll_ms=_roll_ms(v),
        log_retention_ms=_retention_ms(v),
        log_retention_bytes=v.integer("log.retention.bytes"),
        log_retention_check_interval_ms=v.integer("log.retention.check.interval.ms"),
        log_index_interval_bytes=v.integer("log.index.interval.bytes"),
        log_index_size_max_bytes=v.integer("log.index.size.max.bytes"),
        log_flush_interval_messages=v.integer("log.flush.interval.messages"),
        log_flush_interval_ms=_flush_interval_ms(v),
        log_flush_scheduler_interval_ms=v.integer("log.flush.scheduler.interval.ms"),
        log_cleanup_policy=v.strings("log.cleanup.policy"),
        log_message_timestamp_type=v.string("log.message.timestamp.type"),
        message_max_bytes=v.integer("message.max.bytes"),
        compression_type=v.string("compression.type"),
        min_insync_replicas=v.integer("min.insync.replicas"),
        unclean_leader_election_enable=v.boolean("unclean.leader.election.enable"),
        auto_leader_rebalance_enable=v.boolean("auto.leader.rebalance.enable"),
        leader_imbalance_check_interval_seconds=v.integer(
            "leader.imbalance.check.interval.seconds"
        ),
        leader_imbalance_per_broker_percentage=v.integer("leader.imbalance.per.broker.percentage"),
        replica_lag_time_max_ms=v.integer("replica.lag.time.max.ms"),
        replica_fetch_max_bytes=v.integer("replica.fetch.max.bytes"),
        replica_fetch_response_max_bytes=v.integer("replica.fetch.response.max.bytes"),
        replica_fetch_wait_max_ms=v.integer("replica.fetch.wait.max.ms"),
        replica_fetch_backoff_ms=v.integer("replica.fetch.backoff.ms"),
        replica_high_watermark_checkpoint_interval_ms=v.integer(
            "replica.high.watermark.checkpoint.interval.ms"
        ),
        socket_request_max_bytes=v.integer("socket.request.max.bytes"),
        connections_max_idle_ms=v.integer("connections.max.idle.ms"),
        quota_windows=(
            v.integer("quota.window.num"),
            v.integer("quota.window.size.seconds") * 1000,
        ),
        controller_quota_windows=(
            v.integer("controller.quota.window.num"),
            v.integer("controller.quota.window.size.seconds") * 1000,
        ),
        max_incremental_fetch_session_cache_slots=v.integer(
            "max.incremental.fetch.session.cache.slots"
        ),
        offsets_topic_num_partitions=v.integer("offsets.topic.num.partitions"),
        offsets_topic_replication_factor=v.integer("offsets.topic.replication.factor"),
        offsets_retention_ms=v.integer("offsets.retention.minutes") * 60_000,
        offsets_retention_check_interval_ms=v.integer("offsets.retention.check.interval.ms"),
        group_initial_rebalance_delay_ms=v.integer("group.initial.rebalance.delay.ms"),
        group_min_session_timeout_ms=group_min_ms,
        group_max_session_timeout_ms=group_max_ms,
        group_max_size=v.integer("group.max.size"),
        consumer_group=consumer_group_config(v),
        share_coordinator=share_coordinator_settings(v),
        share_group=share_group_config(v),
        share_group_enable=v.boolean("group.share.enable"),
        offsets_topic_segment_bytes=v.integer("offsets.topic.segment.bytes"),
        offset_metadata_max_bytes=v.integer("offset.metadata.max.bytes"),
        transaction_state_log_num_partitions=v.integer("transaction.state.log.num.partitions"),
        transaction_state_log_replication_factor=v.integer(
            "transaction.state.log.replication.factor"
        ),
        transaction_state_log_min_isr=v.integer("transaction.state.log.min.isr"),
        transaction_state_log_segment_bytes=v.integer("transaction.state.log.segment.bytes"),
        transaction_max_timeout_ms=v.integer("transaction.max.timeout.ms"),
        transaction_partition_verification_enable=v.boolean(
            "transaction.partition.verification.enable"
        ),
        transactional_id_expiration_ms=v.integer("transactional.id.expiration.ms"),
        transaction_abort_timed_out_transaction_cleanup_interval_ms=v.integer(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        transaction_remove_expired_transaction_cleanup_interval_ms=v.integer(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        authorizer=_authorizer(v),
        raw=MappingProxyType(raw),
        sources=MappingProxyType(sources),
        listener_keys=MappingProxyType(
            {
                name: (text, dynamic_sources.get(name, ConfigSource.STATIC_BROKER_CONFIG))
                for name, text in given.items()
                if name.startswith(LISTENER_PREFIX)
            }
        ),
        values=MappingProxyType(typed),
        ignored=tuple(
            name
            for name in plain
            if not CONFIG_KEYS_BY_NAME[name].effect and layers.get(name) != DYNAMIC_LAYER
        )
        + ignored_overrides(overrides),
        given=MappingProxyType(dict(given)),
        given_layers=MappingProxyType(dict(layers)),
    )


def _roles(v: TypedValues) -> frozenset[ProcessRole]:
    names = v.strings("process.roles")
    if not names:
        raise invalid_value("process.roles", "", "must list broker, controller or both")
    if len(set(names)) != len(names):
        raise invalid_value("process.roles", ",".join(names), "a role is listed twice")
    return frozenset(ProcessRole(name) for name in names)


def _voters(v: TypedValues) -> tuple[QuorumVoter, ...]:
    voters = tuple(parse_voter(text) for text in v.strings("controller.quorum.voters"))
    seen: set[int] = set()
    for voter in voters:
        if voter.node_id in seen:
            raise invalid_value(
                "controller.quorum.voters",
                ",".join(v.strings("controller.quorum.voters")),
                f"node {voter.node_id} is listed twice",
            )
        seen.add(voter.node_id)
    return voters


def _node_id(
    v: TypedValues, given: Mapping[str, str], layers: Mapping[str, int], *, single_node: bool
) -> int:
    node_id = v.integer("node.id")
    broker_id = v.optional_integer("broker.id")
    node_set = "node.id" in given and node_id != -1
    if broker_id is not None and broker_id != -1:
        if not node_set or layers["broker.id"] > layers["node.id"]:
            node_id = broker_id
        elif node_id != broker_id and layers["broker.id"] == layers["node.id"]:
            raise ConfigError(
                f"'node.id' ({node_id}) and 'broker.id' ({broker_id}) differ: broker.id is "
                "Kafka's older name for node.id; set only one of them",
                key="broker.id",
            )
    if node_id == -1:
        if not single_node:
            raise invalid_value(
                "node.id",
                "-1",
                "must be set to this node's id (0 or more) unless a single node runs both roles",
            )
        node_id = 1
    return node_id


def _log_dir(v: TypedValues) -> Path:
    dirs = v.optional_strings("log.dirs")
    if dirs:
        if len(dirs) > 1:
            raise invalid_value(
                "log.dirs",
                ",".join(dirs),
                f"strom supports one data directory for now; this lists {len(dirs)}",
            )
        return Path(dirs[0])
    return Path(v.string("log.dir"))


def _retention_ms(v: TypedValues) -> int:
    retention_ms = v.optional_integer("log.retention.ms")
    if retention_ms is None:
        minutes = v.optional_integer("log.retention.minutes")
        if minutes is not None:
            retention_ms = minutes * 60_000
        else:
            retention_ms = v.integer("log.retention.hours") * 3_600_000
    return -1 if retention_ms < 0 else retention_ms


def _roll_ms(v: TypedValues) -> int:
    roll_ms = v.optional_integer("log.roll.ms")
    return roll_ms if roll_ms is not None else v.integer("log.roll.hours") * 3_600_000


def _flush_interval_ms(v: TypedValues) -> int:
    flush_ms = v.optional_integer("log.flush.interval.ms")
    return flush_ms if flush_ms is not None else v.integer("log.flush.scheduler.interval.ms")
