"""How consumed records are printed and where reading starts."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

from strom.cli.common import CommandError, ExitCode
from strom.cli.consume import (
    RecordFilter,
    RecordFormat,
    StartPosition,
    parse_timestamp,
    start_position,
)


def test_value_only_by_default() -> None:
    assert RecordFormat().render(0, 7, b"k", b"hello", None) == b"hello\n"


def test_all_fields_in_order_with_the_separator() -> None:
    fmt = RecordFormat(print_key=True, print_headers=True, print_offset=True, separator=b"|")
    line = fmt.render(2, 41, b"user-1", b"v", [("a", b"1"), ("b", None)])
    assert line == b"2:41|a=1,b=null|user-1|v\n"


def test_null_key_and_value_print_as_null_and_no_headers_as_empty() -> None:
    fmt = RecordFormat(print_key=True, print_headers=True)
    assert fmt.render(0, 0, None, None, None) == b"\tnull\tnull\n"


def test_invalid_utf8_is_replaced_unless_raw() -> None:
    assert RecordFormat().render(0, 0, None, b"a\xffb", None) == "a\ufffdb\n".encode()
    assert RecordFormat(raw=True).render(0, 0, None, b"a\xffb", None) == b"a\xffb\n"


def test_headers_given_as_a_dict_or_text() -> None:
    fmt = RecordFormat(print_headers=True)
    assert fmt.render(0, 0, None, b"v", {"x": "y"}) == b"x=y\tv\n"


def test_start_positions() -> None:
    assert start_position(False, False, None) == StartPosition(OFFSET_END, "latest")
    assert start_position(False, True, None) == StartPosition(OFFSET_END, "latest")
    assert start_position(True, False, None) == StartPosition(OFFSET_BEGINNING, "earliest")
    assert start_position(False, False, 42) == StartPosition(42, "earliest")


@pytest.mark.parametrize(
    ("beginning", "end", "offset"), [(True, True, None), (True, False, 3), (False, True, 0)]
)
def test_conflicting_start_options_are_a_usage_error(
    beginning: bool, end: bool, offset: int | None
) -> None:
    with pytest.raises(CommandError) as caught:
        start_position(beginning, end, offset)
    assert caught.value.exit_code == ExitCode.USAGE


def test_a_timestamp_is_milliseconds_or_iso_8601() -> None:
    assert parse_timestamp("1795834630482") == 1795834630482
    assert parse_timestamp("1970-01-01T00:00:02Z") == 2000
    assert parse_timestamp("1970-01-01T00:00:02.5") == 2500  # no offset: UTC
    assert parse_timestamp("1970-01-01T01:00:02+01:00") == 2000
    for bad in ("yesterday", "", "-5", "2026-13-01T00:00:00Z"):
        with pytest.raises(CommandError, match="--from-timestamp") as caught:
            parse_timestamp(bad)
        assert caught.value.exit_code == ExitCode.USAGE


def test_a_timestamp_is_one_more_way_to_choose_where_to_start() -> None:
    assert start_position(False, False, None, 2000) == StartPosition(OFFSET_END, "latest")
    with pytest.raises(CommandError, match="--from-timestamp"):
        start_position(True, False, None, 2000)


def test_grep_matches_the_key_or_the_value() -> None:
    wanted = RecordFilter.create("^ap|user-7")
    assert wanted.matches(b"k", b"apple") and wanted.matches(b"user-7", b"kiwi")
    assert not wanted.matches(b"k", b"grape") and not wanted.matches(None, None)
    assert wanted.matches(None, b"apricot \\xff")  # undecodable bytes do not stop a match
    assert RecordFilter.create(None).matches(None, None)
    with pytest.raises(CommandError, match="not a regular expression"):
        RecordFilter.create("(")
