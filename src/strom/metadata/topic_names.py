"""Kafka's rules for topic names."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str | None:
    """None when `name` is a legal topic name, else the reason it is not."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is {len(name)} characters long; at most {MAX_NAME_LENGTH} are allowed"
    if not _LEGAL.fullmatch(name):
        return (
            f"topic name {name!r} is illegal: it may contain only ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return None


def collision_key(name: str) -> str:
    """Names that differ only in '.' versus '_' collide in metric names, so Kafka refuses both."""
    return name.replace(".", "_")


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    key = collision_key(name)
    for other in existing:
        if other != name and collision_key(other) == key:
            return other
    return None
