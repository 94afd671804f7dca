"""The message browser's query parsing, record matching, value formats and start offsets."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.console.browse import (
    BrowseError,
    BrowseQuery,
    Format,
    FoundRecord,
    RecordMatcher,
    SearchIn,
    Start,
    parse_headers,
    parse_time,
    records_to_read,
    show,
    start_offsets,
)


def test_an_empty_form_asks_for_the_newest_records_of_every_partition_as_text() -> None:
    query = BrowseQuery.parse({})
    assert (query.partition, query.start, query.fmt, query.limit) == (
        None,
        Start.NEWEST,
        Format.TEXT,
        50,
    )
    assert query.matcher.pattern is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"partition": "x"}, "partition: 'x' is not a whole number"),
        ({"partition": "-1"}, "partition: -1 is not between"),
        ({"start": "oldest"}, "start: 'oldest' is not one of newest, earliest, offset, time"),
        ({"start": "offset", "offset": "1.5"}, "offset: '1.5' is not a whole number"),
        ({"start": "time", "time": ""}, "time: give a date and time"),
        ({"start": "time", "time": "yesterday"}, "time: 'yesterday' is not a date and time"),
        ({"limit": "0"}, "limit: 0 is not between 1 and 1000"),
        ({"format": "xml"}, "format: 'xml' is not one of text, json, hex"),
        ({"search": "(", "regex": "1"}, "search: '(' is not a regular expression"),
        ({"in": "headers"}, "in: 'headers' is not one of both, key, value"),
    ],
)
def test_a_bad_field_is_named_in_the_error(fields: dict[str, str], message: str) -> None:
    with pytest.raises(BrowseError, match="^" + message.replace("(", r"\(")):
        BrowseQuery.parse(fields)


def test_times_are_milliseconds_or_iso_8601_in_utc_unless_an_offset_is_given() -> None:
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2026-11-28T09:30:00Z") == parse_time("2026-11-28T09:30")
    assert parse_time("2026-11-28T10:30:00+01:00") == parse_time("2026-11-28T09:30:00Z")


def test_text_is_found_in_key_or_value_without_regard_to_case() -> None:
    both = RecordMatcher.create("Needle", SearchIn.BOTH, regex=False)
    assert both.matches(b"a needle", None)
    assert both.matches(None, b"NEEDLE!")
    assert not both.matches(b"hay", b"stack")
    assert not RecordMatcher.create("needle", SearchIn.KEY, False).matches(b"k", b"needle")
    assert RecordMatcher.create("needle", SearchIn.VALUE, False).matches(b"k", b"needle")
    # Without regex, the text is literal.
    assert not RecordMatcher.create("a.c", SearchIn.BOTH, False).matches(None, b"abc")
    assert RecordMatcher.create("a.c", SearchIn.BOTH, True).matches(None, b"abc")


ASCII = st.text(alphabet=string.printable)


@given(ASCII.map(str.encode) | st.binary(), ASCII.map(str.encode), ASCII.filter(bool))
def test_literal_search_finds_text_exactly_where_it_occurs(
    key: bytes, value: bytes, text: str
) -> None:
    matcher = RecordMatcher.create(text, SearchIn.BOTH, regex=False)

    def contains(data: bytes) -> bool:
        return text.lower() in data.decode("utf-8", errors="replace").lower()

    if key.isascii():
        assert matcher.matches(key, value) == (contains(key) or contains(value))
    planted = RecordMatcher.create(text, SearchIn.VALUE, regex=False)
    assert planted.matches(None, b"<" + text.upper().encode() + b">")
    assert not planted.matches(b"<" + text.encode() + b">", None)


def test_values_are_shown_as_text_json_or_hex() -> None:
    assert show(None, Format.TEXT) == "null"
    assert show(b"caf\xc3\xa9", Format.TEXT) == "café"
    assert show(b"\xff", Format.TEXT) == "\ufffd"
    assert json.loads(show(b'{"a":[1,2]}', Format.JSON)) == {"a": [1, 2]}
    assert show(b'{"a":1}', Format.JSON) == '{\n  "a": 1\n}'
    assert show(b"not json", Format.JSON) == "not json"
    assert show(b"\x00\xab", Format.HEX) == "00 ab"


def test_a_found_record_becomes_cells_with_an_iso_timestamp_and_headers() -> None:
    record = FoundRecord(2, 7, 0, b"k", b"v", (("trace", b"1"), ("empty", None)))
    assert record.cells(Format.TEXT) == (
        "2",
        "7",
        "1970-01-01T00:00:00.000+00:00",
        "k",
        "v",
        "trace: 1\nempty: null",
    )


def test_produce_form_headers_are_name_value_lines() -> None:
    assert parse_headers("a: 1\n\nb=two words\n") == [("a", b"1"), ("b", b"two words")]
    with pytest.raises(BrowseError, match="line 1"):
        parse_headers("no separator")


BOUNDS = {0: (10, 100), 1: (0, 5), 2: (0, 0)}


def test_each_start_is_inside_its_partition() -> None:
    newest = BrowseQuery.parse({"limit": "20"})
    assert start_offsets(newest, BOUNDS, {}) == {0: 80, 1: 0, 2: 0}
    earliest = BrowseQuery.parse({"start": "earliest"})
    assert start_offsets(earliest, BOUNDS, {}) == {0: 10, 1: 0, 2: 0}
    at = BrowseQuery.parse({"start": "offset", "offset": "50"})
    assert start_offsets(at, BOUNDS, {}) == {0: 50, 1: 5, 2: 0}
    timed = BrowseQuery.parse({"start": "time", "time": "5"})
    assert start_offsets(timed, BOUNDS, {0: 42, 1: -1, 2: -1}) == {0: 42, 1: 5, 2: 0}
    assert records_to_read({0: 42, 1: 5, 2: 0}, BOUNDS) == 58


def test_newest_with_a_search_shares_the_reading_budget_between_partitions() -> None:
    query = BrowseQuery.parse({"search": "x", "scan": "60"})
    assert start_offsets(query, BOUNDS, {}) == {0: 80, 1: 0, 2: 0}


@given(
    st.dictionaries(
        st.integers(0, 20),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(sorted).map(tuple),
        max_size=5,
    ),
    st.sampled_from(list(Start)),
    st.integers(0, 2000),
    st.integers(1, 1000),
)
def test_starts_never_leave_the_log(
    bounds: dict[int, tuple[int, int]], start: Start, offset: int, limit: int
) -> None:
    query = BrowseQuery.parse(
        {"start": start.value, "offset": str(offset), "time": "1", "limit": str(limit)}
    )
    starts = start_offsets(query, bounds, {p: offset for p in bounds})
    for partition, begin in starts.items():
        low, high = bounds[partition]
        assert low <= begin <= high


FIELDS = (
    "partition",
    "start",
    "offset",
    "time",
    "search",
    "in",
    "regex",
    "limit",
    "scan",
    "format",
)


@given(st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), st.text(max_size=30)))
def test_any_form_is_a_query_or_an_error_naming_a_field(fields: dict[str, str]) -> None:
    try:
        query = BrowseQuery.parse(fields)
    except BrowseError as error:
        assert str(error).split(":")[0] in FIELDS
    else:
        assert 1 <= query.limit <= 1000
        assert query.partition is None or query.partition >= 0
