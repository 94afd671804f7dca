"""The error every bad setting raises, and where a setting's value came from."""

from __future__ import annotations

from enum import IntEnum


class ConfigError(ValueError):
    """A bad configuration: the message names the key (or the line), what is wrong and what
    is allowed. `key` and `line` say the same for code that wants to point at it."""

    def __init__(self, message: str, *, key: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.line = line


class ConfigSource(IntEnum):
    """Where a config value came from, numbered as in Kafka's DescribeConfigs response.

    strom reports values from the properties file and from `--set` (and the CLI's shortcut
    options) as STATIC_BROKER_CONFIG, built-in defaults as DEFAULT_CONFIG and per-topic
    overrides as DYNAMIC_TOPIC_CONFIG, a group's own configs as GROUP_CONFIG.
    """

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8
