"""strom.config's .properties syntax: separators, comments, continuation lines, escapes
and line endings, as Java's Properties.load reads them.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.config import ConfigError, parse_properties

# ---------------------------------------------------------------- properties syntax


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("a=1", "a", "1"),
        ("a:1", "a", "1"),
        ("a 1", "a", "1"),
        ("a\t1", "a", "1"),
        ("  a  =  1  ", "a", "1"),
        ("a = b c ", "a", "b c"),
        ("a : 1", "a", "1"),
        ("a==1", "a", "=1"),
        ("a = = 1", "a", "= 1"),
        ("a 1=2", "a", "1=2"),
        ("a=", "a", ""),
        ("a", "a", ""),
        ("a=x:y=z", "a", "x:y=z"),
        ("listeners=PLAINTEXT://:9092", "listeners", "PLAINTEXT://:9092"),
    ],
)
def test_separators_and_trimming(line: str, key: str, value: str) -> None:
    assert parse_properties(line) == {key: value}


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# a comment\n! another\n   # indented comment\n\n   \n\t\nkey=value # not a comment\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_backslash_continues_a_line_and_drops_leading_blanks() -> None:
    text = "listeners=PLAINTEXT://:9092,\\\n          CONTROLLER://:9093\nnext=1\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "next": "1",
    }


def test_continuation_lines_are_never_comments() -> None:
    assert parse_properties("a=1\\\n  #2\n") == {"a": "1#2"}


def test_even_number_of_backslashes_does_not_continue() -> None:
    assert parse_properties("a=b\\\\\nc=d") == {"a": "b\\", "c": "d"}


def test_comment_ending_in_backslash_does_not_continue() -> None:
    assert parse_properties("# comment \\\na=1") == {"a": "1"}


def test_continuation_at_end_of_text_and_before_blank_line() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}
    assert parse_properties("a=1\\\n\nb=2") == {"a": "1", "b": "2"}


def test_escapes() -> None:
    text = r"k\=e\:y\ x = tab\there\nnew\\back\u0041\u00e9\=\:\q"
    assert parse_properties(text) == {"k=e:y x": "tab\there\nnew\\backAé=:q"}


def test_surrogate_pair_escape_becomes_one_character() -> None:
    assert parse_properties(r"a=\ud83d\ude00") == {"a": "\U0001f600"}


def test_escaped_trailing_blank_is_kept() -> None:
    assert parse_properties("a=b\\ \t ") == {"a": "b "}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings(newline: str) -> None:
    text = newline.join(["a=1", "# c", "b=2\\", "  3", ""])
    assert parse_properties(text) == {"a": "1", "b": "23"}


def test_last_value_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


@pytest.mark.parametrize("line", ["=value", ": value", "  = value"])
def test_line_without_key_is_an_error_with_its_line_number(line: str) -> None:
    with pytest.raises(ConfigError, match="line 3") as info:
        parse_properties(f"# header\na=1\n{line}\n")
    assert info.value.line == 3


@pytest.mark.parametrize("escape", [r"\u12", r"\uxyzw", "\\u"])
def test_malformed_unicode_escape_is_an_error(escape: str) -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_properties(f"a=1\nb={escape}\n")


@given(st.text())
def test_any_text_parses_or_raises_config_error(text: str) -> None:
    try:
        result = parse_properties(text)
    except ConfigError:
        return
    assert all(isinstance(key, str) and key for key in result)
    assert all(isinstance(value, str) for value in result.values())


@given(st.text(alphabet=st.sampled_from("ab=:#! \t\\\nu0\r\f"), max_size=40))
def test_syntax_heavy_text_parses_or_raises_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_properties(text)


def _escape(text: str) -> str:
    out = []
    for char in text:
        if char.isascii() and char.isalnum():
            out.append(char)
        else:
            encoded = char.encode("utf-16-be")
            for i in range(0, len(encoded), 2):
                out.append(f"\\u{int.from_bytes(encoded[i : i + 2], 'big'):04x}")
    return "".join(out)


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_escaped_entries_round_trip(entries: dict[str, str]) -> None:
    text = "\n".join(f"{_escape(key)}={_escape(value)}" for key, value in entries.items())
    assert parse_properties(text) == entries
