"""strom's configuration: Kafka's `server.properties` keys and syntax, typed and checked.

- `load_config(file_text=..., overrides=[...], shortcuts={...})` -> BrokerConfig
- `parse_properties(text)`: Java .properties syntax
- `CONFIG_KEYS`: every broker key strom knows; `effect=False` ones are accepted for Kafka
  compatibility and ignored
- `TOPIC_CONFIG_KEYS`, `validate_topic_configs`, `effective_topic_config`: per-topic keys
- `BrokerConfig.with_dynamic`, `validate_dynamic_broker_configs`: dynamic broker configs

A pure module: no I/O; the caller reads the file.
"""

from strom.config.broker import BrokerConfig, ProcessRole, load_config, shortcut_overrides
from strom.config.dynamic import (
    canonical_dynamic_broker_configs,
    dynamic_config_key,
    validate_dynamic_broker_configs,
)
from strom.config.errors import ConfigError, ConfigSource
from strom.config.keys import CONFIG_KEYS, CONFIG_KEYS_BY_NAME, config_key
from strom.config.listeners import Endpoint, Listener, QuorumVoter
from strom.config.properties import parse_properties
from strom.config.schema import (
    AtLeast,
    Between,
    ConfigKey,
    ConfigType,
    ConfigValue,
    DynamicUpdateMode,
    NonEmpty,
    OneOf,
    Validator,
)
from strom.config.topic import (
    TOPIC_CONFIG_KEYS,
    TopicConfigKey,
    broker_default,
    effective_topic_config,
    validate_topic_configs,
)

__all__ = [
    "CONFIG_KEYS",
    "CONFIG_KEYS_BY_NAME",
    "TOPIC_CONFIG_KEYS",
    "AtLeast",
    "Between",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigType",
    "ConfigValue",
    "DynamicUpdateMode",
    "Endpoint",
    "Listener",
    "NonEmpty",
    "OneOf",
    "ProcessRole",
    "QuorumVoter",
    "TopicConfigKey",
    "Validator",
    "broker_default",
    "canonical_dynamic_broker_configs",
    "config_key",
    "dynamic_config_key",
    "effective_topic_config",
    "load_config",
    "parse_properties",
    "shortcut_overrides",
    "validate_dynamic_broker_configs",
    "validate_topic_configs",
]
