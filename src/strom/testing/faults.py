"""Requests the test network answers itself: a pure core, no I/O.

A rule makes the next `count` requests of one API (to one node, or to any) fail with an
error code the client acts on, or wait before they reach the broker, as kfake's control
hooks do. Rules apply to client connections only, in the order they were added; each
request consumes one use of the first rule that matches it.

    no rules -> add(...) -> take(...) per request, until its count is used -> no rules
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Injection:
    """What happens to one request: answered with `error` (never reaching the broker),
    or held `delay_s` seconds first and then passed on (when `error` is None)."""

    error: ErrorCode | None
    delay_s: float = 0.0


@dataclass(slots=True)
class _Rule:
    api_key: int
    node_id: int | None
    remaining: int
    injection: Injection


@dataclass(slots=True)
class RequestFaults:
    _rules: list[_Rule] = field(default_factory=list)

    def add(
        self, api_key: int, injection: Injection, *, count: int = 1, node_id: int | None = None
    ) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        if injection.delay_s < 0:
            raise ValueError(f"a delay cannot be negative, got {injection.delay_s}")
        self._rules.append(_Rule(api_key, node_id, count, injection))

    def take(self, node_id: int, api_key: int) -> Injection | None:
        """The injection for one request of `api_key` to `node_id`, if a rule has one left."""
        for index, rule in enumerate(self._rules):
            if rule.api_key == api_key and rule.node_id in (None, node_id):
                rule.remaining -= 1
                if rule.remaining == 0:
                    del self._rules[index]
                return rule.injection
        return None

    def remaining(self, api_key: int | None = None) -> int:
        """Uses left, over all rules or those of one API."""
        return sum(r.remaining for r in self._rules if api_key in (None, r.api_key))

    def clear(self) -> None:
        self._rules.clear()
