"""Kafka's `sasl.jaas.config` values: the login modules of one SASL mechanism.

Pure: no I/O. The syntax is Kafka's (its `JaasConfig`, read with Java's `StreamTokenizer`):

    <login module class> <flag> (<name>=<value>)* ;   (one or more such entries)

The flag is `required`, `requisite`, `sufficient` or `optional`, in any case. A name or a
value is a bare word (letters, `_`, `$`, then also digits, `.` and `-`) or a string in
double or single quotes, where a backslash escapes as in Java (`\\n`, `\\t`, `\\"`, `\\\\`,
octal `\\101`). `//`, `/* ... */` and, as Java's tokenizer has it, a lone `/` start
comments. As in Kafka, a bare number (`option=3`) is not a value: it must be quoted.

Two things are stricter than Kafka, which would read on with a silently cut value: a
quoted string must close on its own line, and a `/*` comment must close.

The parser is written by hand: no Python library reads this syntax. Its errors name the
config key, the entry and the option by number and position, never a value or an option
name, since the text holds passwords (a misplaced token may be one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from types import MappingProxyType

from strom.config.errors import ConfigError

__all__ = [
    "PLAIN_LOGIN_MODULE",
    "ControlFlag",
    "JaasEntry",
    "parse_jaas_config",
    "plain_users",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_USER_PREFIX = "user_"


class ControlFlag(StrEnum):
    """How a login module counts (JAAS); a `str`, so it compares equal to its text."""

    REQUIRED = "required"
    REQUISITE = "requisite"
    SUFFICIENT = "sufficient"
    OPTIONAL = "optional"


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module of a JAAS config: its class name, flag and options (read-only;
    the last of a repeated option name wins, as in Kafka). Its repr shows option names,
    never their values."""

    login_module: str
    control_flag: ControlFlag
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    def __post_init__(self) -> None:
        # A copy: a proxy of the caller's dict would change with it.
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def __repr__(self) -> str:
        names = ", ".join(self.options)
        return (
            f"JaasEntry(login_module={self.login_module!r}, "
            f"control_flag={self.control_flag.value!r}, options=<{names}>)"
        )


# --- tokens ---------------------------------------------------------------------------


class _Kind(Enum):
    WORD = "a bare word"
    QUOTED = "a quoted string"
    NUMBER = "a bare number"
    CHAR = "a character"
    END = "the end of the text"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str  # a word's or string's text; a CHAR's character; "" otherwise
    position: int  # 1-based character offset in the config text

    @property
    def has_text(self) -> bool:
        """Whether Java's tokenizer would give it an `sval`: a name or value."""
        return self.kind in (_Kind.WORD, _Kind.QUOTED)


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = "01234567"
_DIGITS = "0123456789"
_QUOTE_HINT = "quote a value that holds characters other than letters, digits, '.', '-', '_', '$'"


def _word_start(char: str) -> bool:
    code = ord(char)
    return ("a" <= char <= "z") or ("A" <= char <= "Z") or char in "_$" or code >= 0xA0


def _word_part(char: str) -> bool:
    return _word_start(char) or char in _DIGITS or char in ".-"


class _Tokens:
    """The tokens of a config text, as Kafka's StreamTokenizer settings cut it."""

    def __init__(self, text: str, key: str) -> None:
        self._text = text
        self._key = key
        self._at = 0

    def _error(self, problem: str) -> ConfigError:
        return _error(self._key, problem)

    def next(self) -> _Token:
        text = self._text
        while True:
            self._skip_space()
            if self._at >= len(text):
                return _Token(_Kind.END, "", len(text) + 1)
            if text[self._at] != "/":
                break
            self._skip_comment()
        start = self._at
        char = text[start]
        after = text[start + 1] if start + 1 < len(text) else ""
        if char in _DIGITS or char == "." or (char == "-" and (after in _DIGITS or after == ".")):
            self._at += 1
            while self._at < len(text) and (text[self._at] in _DIGITS or text[self._at] == "."):
                self._at += 1
            return _Token(_Kind.NUMBER, "", start + 1)
        if _word_start(char):
            self._at += 1
            while self._at < len(text) and _word_part(text[self._at]):
                self._at += 1
            return _Token(_Kind.WORD, text[start : self._at], start + 1)
        if char in "\"'":
            return _Token(_Kind.QUOTED, self._quoted(char), start + 1)
        self._at += 1
        return _Token(_Kind.CHAR, char, start + 1)

    def _skip_space(self) -> None:
        while self._at < len(self._text) and ord(self._text[self._at]) <= 0x20:
            self._at += 1

    def _skip_comment(self) -> None:
        """Past the comment starting at a `/`: `/* ... */`, or `//` (or a lone `/`, which
        Java's tokenizer also takes for a comment) to the end of the line."""
        text, start = self._text, self._at
        if text.startswith("/*", start):
            end = text.find("*/", start + 2)
            if end == -1:
                raise self._error(f"the comment at character {start + 1} is not closed by */")
            self._at = end + 2
            return
        while self._at < len(text) and text[self._at] not in "\r\n":
            self._at += 1

    def _quoted(self, quote: str) -> str:
        """The text of the string opening with `quote` at the current position."""
        text, start = self._text, self._at
        pieces: list[str] = []
        i = start + 1
        while True:
            if i >= len(text) or text[i] in "\r\n":
                raise self._error(
                    f"the quoted string at character {start + 1} is not closed on its line"
                )
            char = text[i]
            if char == quote:
                self._at = i + 1
                return "".join(pieces)
            if char != "\\":
                pieces.append(char)
                i += 1
                continue
            if i + 1 >= len(text):
                raise self._error(
                    f"the quoted string at character {start + 1} ends with a lone backslash"
                )
            escaped = text[i + 1]
            i += 2
            if escaped in _OCTAL:
                # Up to three octal digits, three only when the first is 0-3 (at most \377).
                digits = escaped
                longest = 3 if escaped in "0123" else 2
                while len(digits) < longest and i < len(text) and text[i] in _OCTAL:
                    digits += text[i]
                    i += 1
                pieces.append(chr(int(digits, 8)))
            else:
                pieces.append(_ESCAPES.get(escaped, escaped))


# --- entries --------------------------------------------------------------------------


def _error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid value for {key!r}: {problem}", key=key)


def parse_jaas_config(text: str, *, key: str) -> tuple[JaasEntry, ...]:
    """The login modules of a `sasl.jaas.config` value, in order; ConfigError naming `key`
    and what is wrong (never a value) when it is not Kafka's JAAS syntax or has no entry."""
    tokens = _Tokens(text, key)
    entries: list[JaasEntry] = []
    while (token := tokens.next()).kind is not _Kind.END:
        entries.append(_entry(token, tokens, key, len(entries) + 1))
    if not entries:
        raise _error(key, "no login module: expected '<login module class> <flag> ...;'")
    return tuple(entries)


def _entry(first: _Token, tokens: _Tokens, key: str, number: int) -> JaasEntry:
    where = f"entry {number}"
    if not first.has_text or not first.text:
        raise _error(
            key,
            f"{where} (character {first.position}) must start with a login module class "
            f"name, not {first.kind.value}",
        )
    flag_token = tokens.next()
    if flag_token.kind is _Kind.END:
        raise _error(key, f"{where} has no control flag ({_flags()})")
    flag = _flag(flag_token)
    if flag is None:
        raise _error(
            key,
            f"{where}: the control flag at character {flag_token.position} must be one of "
            f"{_flags()}",
        )
    options: dict[str, str] = {}
    option = 0
    while (token := tokens.next()).kind is not _Kind.END and not _is_char(token, ";"):
        option += 1
        here = f"{where}, option {option} (character {token.position})"
        if not token.has_text:
            hint = f" ({_QUOTE_HINT})" if token.kind is _Kind.CHAR and option > 1 else ""
            raise _error(
                key, f"{here}: expected an option name or ';', found {token.kind.value}{hint}"
            )
        equals = tokens.next()
        if not _is_char(equals, "="):
            raise _error(
                key,
                f"{here} has no value: expected '=' after its name"
                + (", or a ';' before the next entry" if equals.kind is _Kind.WORD else ""),
            )
        value = tokens.next()
        if value.kind is _Kind.NUMBER:
            raise _error(key, f"{here} has a bare number for its value: quote it")
        if not value.has_text:
            raise _error(
                key,
                f"{here} has no value: after '=' expected a bare word or a quoted string "
                f"({_QUOTE_HINT})",
            )
        options[token.text] = value.text
    if token.kind is _Kind.END:
        raise _error(key, f"{where} does not end with ';'")
    return JaasEntry(first.text, flag, MappingProxyType(options))


def _is_char(token: _Token, char: str) -> bool:
    return token.kind is _Kind.CHAR and token.text == char


def _flag(token: _Token) -> ControlFlag | None:
    if not token.has_text:
        return None
    try:
        return ControlFlag(token.text.lower())
    except ValueError:
        return None


def _flags() -> str:
    return ", ".join(flag.value for flag in ControlFlag)


def plain_users(entries: Sequence[JaasEntry], *, key: str) -> Mapping[str, str]:
    """The users PLAIN accepts: name -> password, from the `user_<name>="<password>"`
    options of the PlainLoginModule entries (the first entry naming a user wins, as Kafka
    looks a user up). The entry's `username`/`password` (the broker's own login) are not
    users. ConfigError naming `key` when no entry is a PlainLoginModule."""
    plain = [entry for entry in entries if entry.login_module == PLAIN_LOGIN_MODULE]
    if not plain:
        found = ", ".join(entry.login_module for entry in entries) or "none"
        raise _error(key, f"PLAIN needs a login module {PLAIN_LOGIN_MODULE} (found: {found})")
    users: dict[str, str] = {}
    for entry in plain:
        for name, password in entry.options.items():
            user = name.removeprefix(_USER_PREFIX)
            if name.startswith(_USER_PREFIX) and user and user not in users:
                users[user] = password
    return MappingProxyType(users)
