"""Config key definitions: value types, validators, and turning text into typed values.

Text is read as Kafka's ConfigDef reads it: trimmed, integers in Java's int/long range,
booleans `true`/`false` in any case, lists split on commas.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from enum import Enum
from typing import Protocol, TypeAlias

from strom.config.errors import ConfigError

ConfigValue: TypeAlias = int | float | bool | str | tuple[str, ...] | None
"""A typed value: int for INT and LONG, float for DOUBLE, tuple[str, ...] for LIST."""

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class ConfigType(Enum):
    INT = "int"
    LONG = "long"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    DOUBLE = "double"


class Validator(Protocol):
    """Returns what is wrong with a (non-None) typed value, or None when it is fine."""

    def __call__(self, value: ConfigValue) -> str | None: ...


def _is_number(value: ConfigValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class AtLeast:
    minimum: int | float

    def __call__(self, value: ConfigValue) -> str | None:
        if _is_number(value) and value < self.minimum:  # type: ignore[operator]
            return f"must be at least {self.minimum}"
        return None


@dataclass(frozen=True, slots=True)
class Between:
    minimum: int | float
    maximum: int | float

    def __call__(self, value: ConfigValue) -> str | None:
        if _is_number(value) and not self.minimum <= value <= self.maximum:  # type: ignore[operator]
            return f"must be between {self.minimum} and {self.maximum}"
        return None


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string that is one of `choices`, or a list whose every item is (case-sensitive)."""

    choices: tuple[str, ...]

    def __call__(self, value: ConfigValue) -> str | None:
        allowed = ", ".join(self.choices)
        if isinstance(value, str) and value not in self.choices:
            return f"must be one of {allowed}"
        if isinstance(value, tuple):
            for item in value:
                if item not in self.choices:
                    return f"{item!r} is not one of {allowed}"
        return None


@dataclass(frozen=True, slots=True)
class NonEmpty:
    def __call__(self, value: ConfigValue) -> str | None:
        if value == "" or value == ():
            return "must not be empty"
        return None


def parse_value(name: str, type_: ConfigType, text: str) -> ConfigValue:
    """The typed value of `text` for key `name`; ConfigError naming the key if it is not one."""
    stripped = text.strip()
    match type_:
        case ConfigType.INT | ConfigType.LONG:
            limit = INT_MAX if type_ is ConfigType.INT else LONG_MAX
            kind = "an integer" if type_ is ConfigType.INT else "a long integer"
            if not _INTEGER.fullmatch(stripped):
                raise invalid_value(name, text, f"expected {kind}")
            number = int(stripped)
            if not -limit - 1 <= number <= limit:
                raise invalid_value(name, text, f"expected {kind} between {-limit - 1} and {limit}")
            return number
        case ConfigType.BOOLEAN:
            lowered = stripped.lower()
            if lowered not in ("true", "false"):
                raise invalid_value(name, text, "expected true or false")
            return lowered == "true"
        case ConfigType.DOUBLE:
            if not _DOUBLE.fullmatch(stripped):
                raise invalid_value(name, text, "expected a number")
            return float(stripped)
        case ConfigType.LIST:
            return tuple(item.strip() for item in stripped.split(",") if item.strip())
        case ConfigType.STRING:
            return stripped


def format_value(value: ConfigValue) -> str | None:
    """The canonical text of a typed value, as DescribeConfigs reports it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def check_value(
    name: str, type_: ConfigType, validator: Validator | None, text: str
) -> ConfigValue:
    value = parse_value(name, type_, text)
    if validator is not None:
        problem = validator(value)
        if problem is not None:
            raise invalid_value(name, text, problem)
    return value


def invalid_value(name: str, text: str, problem: str) -> ConfigError:
    """`invalid value 'text' for 'name': problem`."""
    return ConfigError(f"invalid value {text.strip()!r} for {name!r}: {problem}", key=name)


class DynamicUpdateMode(Enum):
    """How a broker key may change at run time, as Kafka's docs say ("Dynamic Update Mode")."""

    READ_ONLY = "read-only"
    """Only in the properties file (or --set): a change needs a restart."""
    PER_BROKER = "per-broker"
    """Dynamically, for one broker at a time."""
    CLUSTER_WIDE = "cluster-wide"
    """Dynamically, as the cluster-wide default, and also for one broker."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """A broker config key. `default` is text as in a properties file (None: unset).

    `effect=False` marks a Kafka key strom accepts so Kafka's files start unchanged, but
    that changes nothing; the broker logs those once at start. `dynamic` says whether
    AlterConfigs may change it at run time. `sensitive` (Kafka's PASSWORD type): its value
    is never shown, DescribeConfigs answers null for it.
    """

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    effect: bool = True
    dynamic: DynamicUpdateMode = DynamicUpdateMode.READ_ONLY
    sensitive: bool = False

    def parse(self, text: str) -> ConfigValue:
        """The typed, validated value of `text`; ConfigError naming this key otherwise."""
        return check_value(self.name, self.type, self.validator, text)

    @property
    def default_value(self) -> ConfigValue:
        return None if self.default is None else self.parse(self.default)


def unknown_key(name: str, known: Sequence[str], what: str = "config key") -> ConfigError:
    """`unknown config key 'x' (did you mean 'y'?)`."""
    close = get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown {what} {name!r}{hint}", key=name)
