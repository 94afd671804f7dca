"""Turning stdin lines into records, and counting deliveries."""

from __future__ import annotations

from dataclasses import dataclass

from strom.cli.produce import DeliveryTally, encode_headers, split_key, strip_line_end


@dataclass(frozen=True)
class FakeError:
    error_name: str
    text: str

    def name(self) -> str:
        return self.error_name

    def str(self) -> str:
        return self.text


def test_line_end_is_not_part_of_the_value() -> None:
    assert strip_line_end(b"hello\n") == b"hello"
    assert strip_line_end(b"hello\r\n") == b"hello"
    assert strip_line_end(b"last line without newline") == b"last line without newline"
    assert strip_line_end(b"\n") == b""
    assert strip_line_end(b"keep\r") == b"keep\r"


def test_key_is_the_text_before_the_first_separator() -> None:
    assert split_key(b"k1:v:1", b":") == (b"k1", b"v:1", True)
    assert split_key(b":value", b":") == (b"", b"value", True)
    assert split_key(b"key\t", b"\t") == (b"key", b"", True)
    assert split_key(b"a::b", b"::") == (b"a", b"b", True)


def test_without_separator_there_is_no_key() -> None:
    assert split_key(b"no separator here", b"|") == (None, b"no separator here", False)
    assert split_key(b"a:b", None) == (None, b"a:b", True)


def test_headers_are_utf8_encoded() -> None:
    assert encode_headers([("trace", "é1"), ("empty", "")]) == [
        ("trace", "é1".encode()),
        ("empty", b""),
    ]


def test_tally_counts_deliveries_and_keeps_the_first_error() -> None:
    tally = DeliveryTally()
    tally(None, None)
    tally(FakeError("_MSG_TIMED_OUT", "Local: Message timed out"), None)  # type: ignore[arg-type]
    tally(FakeError("RECORD_LIST_TOO_LARGE", "Broker: too large"), None)  # type: ignore[arg-type]
    tally(None, None)
    assert (tally.delivered, tally.failed) == (2, 2)
    assert tally.first_error == "_MSG_TIMED_OUT: Local: Message timed out"
