"""The topic regexes of KIP-848 subscriptions (`subscribed_topic_regex`), read as Kafka's
coordinator reads them: RE2 syntax (Kafka uses RE2/J), matched against a whole topic name.

RE2 matches in time linear in the name, whatever the pattern, so a member's pattern
cannot make the coordinator backtrack for seconds while every group it serves waits (a
`(a+)+$` against a long topic name would with Python's `re`). A pattern RE2 refuses
(look-arounds, back references, a repetition above 1,000, a program over `MAX_MEMORY`)
is an invalid regular expression, as in Kafka. Compiled patterns are kept in a bounded
cache: members heartbeat with the same pattern again and again.
"""

from __future__ import annotations

from functools import lru_cache

import re2

__all__ = ["MAX_MEMORY", "TopicRegex", "topic_regex"]

MAX_MEMORY = 256 << 10
"""Bytes one compiled pattern may use (RE2's default allows 8 MiB; a topic pattern needs a
few KiB). With the cache's 128 entries, compiled patterns hold at most 32 MiB."""


class TopicRegex:
    """One compiled pattern."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: re2._Regexp) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def matches(self, topic: str) -> bool:
        """Whether the whole of `topic` matches."""
        return self._compiled.fullmatch(topic) is not None


@lru_cache(maxsize=128)
def topic_regex(pattern: str) -> TopicRegex:
    """The compiled pattern; ValueError saying why RE2 refuses it."""
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is answered, not logged by RE2
    options.max_mem = MAX_MEMORY
    try:
        return TopicRegex(pattern, re2.compile(pattern, options=options))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None
