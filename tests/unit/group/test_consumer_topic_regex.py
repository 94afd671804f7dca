"""KIP-848 topic regexes: RE2's syntax, whole-name matches, and no backtracking."""

from __future__ import annotations

import pytest

from strom.group.consumer.topic_regex import topic_regex


def test_a_pattern_matches_whole_topic_names() -> None:
    pattern = topic_regex("orders-.*")
    assert pattern.matches("orders-eu")
    assert pattern.matches("orders-")
    assert not pattern.matches("old-orders-eu")
    assert not topic_regex("orders").matches("orders-eu")
    assert topic_regex("(orders|payments)-[0-9]+").matches("payments-12")


def test_a_pattern_that_backtracks_forever_in_python_is_matched_at_once() -> None:
    # Python's re takes exponential time on this; RE2 is linear in the name.
    assert not topic_regex("(a+)+$").matches("a" * 240 + "!")
    assert topic_regex("(a|aa)+").matches("a" * 249)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?<=x)y", "invalid perl operator"),  # look-behind: not in RE2, nor in RE2/J
        ("(a)\\1", "invalid escape sequence"),  # back reference
        ("[z-a]", "invalid character class range"),
        ("(a{1000}){1000}", "invalid repetition size"),
        ("orders-(", "missing )"),
    ],
)
def test_what_re2_refuses_is_an_invalid_pattern(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace(")", r"\)")):
        topic_regex(pattern)


def test_compiled_patterns_are_reused() -> None:
    assert topic_regex("events-.*") is topic_regex("events-.*")
