"""The broker config keys strom knows, with Kafka's names and (unless noted) Kafka's defaults.

Keys with `effect=False` are Kafka keys accepted so that Kafka's shipped `server.properties`
files start strom unchanged; they change nothing (the broker logs them at start).

The keys are written in node_keys, log_keys, cluster_keys, security_keys and compat_keys;
this module puts them in one registry, in their established order (a config's `raw` and
`values` follow it), marks which are dynamic and which not yet in effect, and looks them
up.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from strom.config.cluster_keys import GROUP_KEYS, REPLICATION_KEYS, TXN_KEYS
from strom.config.compat_keys import KAFKA_ONLY_KEYS
from strom.config.log_keys import LOG_KEYS
from strom.config.node_keys import CONNECTION_KEYS, NODE_KEYS
from strom.config.schema import ConfigKey, DynamicUpdateMode, unknown_key
from strom.config.security_keys import (
    AUTHORIZER_KEYS,
    LOGIN_COMPAT_KEYS,
    OAUTHBEARER_KEYS,
    SASL_KEYS,
    SECURITY_COMPAT_KEYS,
    SSL_KEYS,
)
from strom.config.share_coordinator import SHARE_COORDINATOR_KEYS

__all__ = [
    "CLUSTER_WIDE_KEYS",
    "CONFIG_KEYS",
    "CONFIG_KEYS_BY_NAME",
    "NOT_YET_IN_EFFECT",
    "PER_BROKER_KEYS",
    "config_key",
]

CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *NODE_KEYS,  # node and roles, listeners, controller quorum (node_keys.py)
    *LOG_KEYS,  # storage, log cleaner (log_keys.py)
    *REPLICATION_KEYS,  # topic defaults and replication (cluster_keys.py)
    *CONNECTION_KEYS,  # requests and connections (node_keys.py)
    *SSL_KEYS,  # TLS on SSL listeners (security_keys.py)
    *SASL_KEYS,  # SASL listeners (security_keys.py)
    *OAUTHBEARER_KEYS,  # OAUTHBEARER's signed-token validator (security_keys.py)
    *LOGIN_COMPAT_KEYS,  # Kafka's broker login keys, no effect (security_keys.py)
    *AUTHORIZER_KEYS,  # ACLs (security_keys.py)
    *GROUP_KEYS,  # consumer groups (cluster_keys.py)
    *TXN_KEYS,  # transactions (cluster_keys.py)
    *SHARE_COORDINATOR_KEYS,  # the share coordinator (share_coordinator.py)
    *KAFKA_ONLY_KEYS,  # accepted for compatibility, no effect (compat_keys.py)
    *SECURITY_COMPAT_KEYS,  # Kafka's Kerberos and JSSE keys, no effect (security_keys.py)
)

# Keys that are parsed and validated today but that only a later capability acts on
# (the cluster, replication, consumer groups, broker-side recompression). The broker
# lists them at start like the compatibility keys, so nobody mistakes them for working.
NOT_YET_IN_EFFECT = frozenset(
    {
        "controller.quorum.election.backoff.max.ms",
        "log.index.size.max.bytes",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "compression.type",
    }
)

# Keys AlterConfigs may change at run time, for the whole cluster (the dynamic default) or
# for one broker: those Kafka's docs list with "Dynamic Update Mode: cluster-wide" (the
# broker keys behind topic configs, the log cleaner's and the thread pools'). The
# hours/minutes forms (log.retention.hours, log.roll.hours, ...) are read-only in Kafka:
# their millisecond forms are the dynamic ones. Kafka's per-broker keys (listeners and
# their TLS settings but the stores) stay read-only here: strom cannot rebind a
# listener live.
CLUSTER_WIDE_KEYS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.retention.ms",
        "log.retention.bytes",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.segment.delete.delay.ms",
        "log.cleanup.policy",
        "log.cleaner.threads",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.preallocate",
        "message.max.bytes",
        "strom.share.delivery.delay.ms",
        "strom.share.redelivery.backoff.ms",
        "strom.share.redelivery.backoff.max.ms",
        "compression.type",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "transaction.partition.verification.enable",
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        "background.threads",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
    }
)
PER_BROKER_KEYS: frozenset[str] = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism.inter.broker.protocol",
        # Kafka's dynamic security keys that strom accepts without acting on them.
        "ssl.protocol",
        *(key.name for key in SECURITY_COMPAT_KEYS),
    }
)
"""Keys that may change per broker but not as a cluster default: an SSL listener's key
and trust stores (also in their `listener.name.<listener>.` forms), which a running
listener reloads for its next handshakes, as Kafka's dynamic listener reconfiguration
does; how the node's own connections to other nodes check host names and log in (their
next connections use the change); and Kafka's dynamic security keys that strom accepts
and does not act on."""


def _finish(key: ConfigKey) -> ConfigKey:
    if key.name in NOT_YET_IN_EFFECT:
        key = replace(key, effect=False)
    if key.name in CLUSTER_WIDE_KEYS:
        key = replace(key, dynamic=DynamicUpdateMode.CLUSTER_WIDE)
    elif key.name in PER_BROKER_KEYS:
        key = replace(key, dynamic=DynamicUpdateMode.PER_BROKER)
    return key


CONFIG_KEYS = tuple(_finish(key) for key in CONFIG_KEYS)

CONFIG_KEYS_BY_NAME = MappingProxyType({key.name: key for key in CONFIG_KEYS})


def config_key(name: str) -> ConfigKey:
    """The broker key `name`; ConfigError with a did-you-mean hint if there is none."""
    try:
        return CONFIG_KEYS_BY_NAME[name]
    except KeyError:
        raise unknown_key(name, tuple(CONFIG_KEYS_BY_NAME)) from None
