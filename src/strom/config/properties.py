"""Java `.properties` syntax, as `java.util.Properties.load` reads it.

Written by hand: the format is small and no maintained Python package reads it exactly as
Java does (continuations, `key value` separators, `\\uXXXX` escapes). One difference from
Java, as Kafka's config parsing does afterwards: unescaped whitespace at the end of a value
is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from strom.config.errors import ConfigError

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANK = " \t\f"
_SEPARATORS = "=:"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def parse_properties(text: str) -> dict[str, str]:
    """Every `key=value` in `text`; a key given twice keeps its last value.

    Raises ConfigError (with the line number) on a line that has a value but no key, or a
    malformed `\\uXXXX` escape.
    """
    entries: dict[str, str] = {}
    for line_number, logical_line in _logical_lines(text):
        key, value = _split_entry(logical_line, line_number)
        entries[key] = value
    return entries


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of the first natural line, logical line with its continuations joined),
    skipping blank lines and comments. Leading blanks are already stripped."""
    natural = _LINE_BREAK.split(text)
    index = 0
    while index < len(natural):
        first = index
        line = natural[index].lstrip(_BLANK)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while _ends_with_continuation(line):
            parts.append(line[:-1])
            if index == len(natural):
                line = ""
                break
            line = natural[index].lstrip(_BLANK)
            index += 1
        parts.append(line)
        yield first + 1, "".join(parts)


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_entry(line: str, line_number: int) -> tuple[str, str]:
    end = 0
    escaped = False
    while end < len(line):
        char = line[end]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in _SEPARATORS or char in _BLANK:
            break
        end += 1
    start = end
    has_separator = False
    while start < len(line):
        char = line[start]
        if char in _BLANK:
            start += 1
        elif char in _SEPARATORS and not has_separator:
            has_separator = True
            start += 1
        else:
            break
    key = _unescape(line[:end], line_number)
    if not key:
        raise ConfigError(
            f"line {line_number}: no key before the value {line.strip()!r}; "
            "expected key=value, key: value or key value",
            line=line_number,
        )
    return key, _unescape(line[start:], line_number)


def _unescape(raw: str, line_number: int) -> str:
    """Resolve escapes; drop unescaped trailing blanks."""
    chars: list[str] = []
    keep = 0  # chars[:keep] ends with an escaped character and is never trimmed
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\":
            chars.append(char)
            continue
        if index == len(raw):
            break
        code = raw[index]
        index += 1
        if code == "u":
            digits = raw[index : index + 4]
            if len(digits) != 4 or not all(d in _HEX_DIGITS for d in digits):
                raise ConfigError(
                    f"line {line_number}: malformed escape '\\u{digits}': "
                    "expected \\u and four hex digits",
                    line=line_number,
                )
            index += 4
            unit = int(digits, 16)
            if 0xDC00 <= unit <= 0xDFFF and chars and 0xD800 <= ord(chars[-1]) <= 0xDBFF:
                high = ord(chars.pop())
                chars.append(chr(0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00)))
            else:
                chars.append(chr(unit))
        else:
            chars.append(_SIMPLE_ESCAPES.get(code, code))
        keep = len(chars)
    while len(chars) > keep and chars[-1] in _BLANK:
        chars.pop()
    return "".join(chars)
