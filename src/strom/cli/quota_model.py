"""What `strom quota` decides without a broker: the entity its options name, the changes
its arguments ask for, the requests it sends and how it shows the answers. Pure; the
commands are quota.py's. No kio here: requests are plain mappings and answers are read
by attribute, so this module loads fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.cli.common import CommandError, kafka_error_message, usage_error

__all__ = [
    "EntityChoice",
    "QuotaChange",
    "alter_errors",
    "alter_request",
    "describe_error",
    "describe_request",
    "entity_label",
    "entity_parts",
    "filter_components",
    "parse_changes",
    "quota_rows",
    "value_text",
]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
DEFAULT = "<default>"
KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
)
"""Kafka's quota keys, which the broker checks (strom does not refuse others first, so a
broker that knows more keys gets them)."""
HEADERS = ("ENTITY", "KEY", "VALUE")
MATCH_EXACT, MATCH_DEFAULT = 0, 1


@dataclass(frozen=True, slots=True)
class EntityChoice:
    """One entity type as the options name it: `name`, or its default."""

    name: str | None = None
    default: bool = False

    @property
    def given(self) -> bool:
        return self.name is not None or self.default


def _choice(kind: str, name: str | None, default: bool) -> EntityChoice:
    if name is not None and default:
        raise usage_error(f"choose one of --{kind} NAME and --{kind}-default")
    if name is not None and not name:
        raise usage_error(f"--{kind} must not be empty")
    return EntityChoice(name, default)


def entity_parts(
    user: EntityChoice, client_id: EntityChoice, ip: EntityChoice
) -> list[tuple[str, str | None]]:
    """The (type, name) parts of the entity `set` alters, name None for a default; a usage
    error for none or an IP with a user or client id (Kafka refuses it)."""
    for kind, choice in ((USER, user), (CLIENT_ID, client_id), (IP, ip)):
        _choice(kind, choice.name, choice.default)
    parts = [
        (kind, choice.name)
        for kind, choice in ((USER, user), (CLIENT_ID, client_id), (IP, ip))
        if choice.given
    ]
    if not parts:
        raise usage_error(
            "name an entity: --user, --client-id or --ip (or their --*-default options)"
        )
    if ip.given and (user.given or client_id.given):
        raise usage_error("an --ip quota cannot be combined with --user or --client-id")
    return parts


def entity_label(parts: Iterable[tuple[str, str | None]]) -> str:
    """`user=alice, client-id=<default>`, a user before its client id."""
    rank = {USER: 0, CLIENT_ID: 1, IP: 2}
    ordered = sorted(parts, key=lambda part: rank.get(part[0], 3))
    return ", ".join(f"{kind}={DEFAULT if name is None else name}" for kind, name in ordered)


@dataclass(frozen=True, slots=True)
class QuotaChange:
    key: str
    value: float | None
    """None removes the key."""


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise usage_error(f"{key}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise usage_error(f"{key}: {text!r} is not a finite number")
    return value


def parse_changes(settings: Sequence[str], removals: Sequence[str]) -> list[QuotaChange]:
    """`KEY=VALUE` settings and `--remove KEY` removals, each key once."""
    changes: dict[str, QuotaChange] = {}
    for text in settings:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise usage_error(f"expected KEY=VALUE, got {text!r}")
        if key in changes:
            raise usage_error(f"{key} is given twice")
        changes[key] = QuotaChange(key, _number(key, value.strip()))
    for key in removals:
        if key in changes:
            raise usage_error(f"{key} is given twice")
        changes[key] = QuotaChange(key, None)
    if not changes:
        raise usage_error("nothing to change: give KEY=VALUE or --remove KEY")
    return list(changes.values())


def alter_request(
    parts: Sequence[tuple[str, str | None]], changes: Sequence[QuotaChange], validate_only: bool
) -> dict[str, Any]:
    return {
        "entries": [
            {
                "entity": [{"entity_type": k, "entity_name": n} for k, n in parts],
                "ops": [
                    {
                        "key": change.key,
                        "value": 0.0 if change.value is None else change.value,
                        "remove": change.value is None,
                    }
                    for change in changes
                ],
            }
        ],
        "validate_only": validate_only,
    }


def _error_name(code: Any) -> str:
    name = getattr(code, "name", None)
    return str(name).upper() if name else f"error code {int(code)}"


def alter_errors(response: Any) -> list[CommandError]:
    """A CommandError per refused entry of an AlterClientQuotas answer."""
    return [
        CommandError(
            kafka_error_message(
                _error_name(entry.error_code),
                entry.error_message or "refused",
                entity_label((e.entity_type, e.entity_name) for e in entry.entity),
            )
        )
        for entry in response.entries
        if int(entry.error_code) != 0
    ]


def filter_components(
    user: EntityChoice, client_id: EntityChoice, ip: EntityChoice
) -> list[dict[str, Any]]:
    """DescribeClientQuotas' filter: each named type matched exactly, or its default."""
    components = []
    for kind, choice in ((USER, user), (CLIENT_ID, client_id), (IP, ip)):
        choice = _choice(kind, choice.name, choice.default)
        if choice.given:
            components.append(
                {
                    "entity_type": kind,
                    "match_type": MATCH_DEFAULT if choice.default else MATCH_EXACT,
                    "match": choice.name,
                }
            )
    return components


def describe_request(components: Sequence[Mapping[str, Any]], strict: bool) -> dict[str, Any]:
    return {"components": list(components), "strict": strict}


def describe_error(response: Any) -> CommandError | None:
    if int(response.error_code) == 0:
        return None
    return CommandError(
        kafka_error_message(
            _error_name(response.error_code), response.error_message or "refused", "client quotas"
        )
    )


def value_text(value: float) -> str:
    """1048576.0 -> "1048576"; 12.5 stays "12.5"."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)


def quota_rows(response: Any) -> list[tuple[str, str, str]]:
    """(entity, key, value) per quota of a DescribeClientQuotas answer, sorted."""
    rows = [
        (
            entity_label((e.entity_type, e.entity_name) for e in entry.entity),
            value.key,
            value_text(float(value.value)),
        )
        for entry in response.entries or ()
        for value in entry.values
    ]
    return sorted(rows)
