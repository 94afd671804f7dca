"""Who a TLS client is: the name in its certificate, mapped by Kafka's
`ssl.principal.mapping.rules` (KIP-371) to the principal `User:<name>`.

Pure: no I/O. A certificate's subject is written as Java's `X500Principal.getName()`
writes it (RFC 2253: the most specific name first, `CN=alice,OU=eng,O=strom,C=US`), since
the rules users write for Kafka match that text. The rules are written by hand: no
library reads Kafka's rule syntax, and the subject is read straight from the
certificate's DER so that attributes without an RFC 2253 keyword come out as Java writes
them (`1.2.840.113549.1.9.1=#16...`), which no Python library does.

Rule patterns are Python regular expressions (`re`), which agree with Java's for
ordinary patterns: character classes, groups, lazy and greedy repeats, anchors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from strom.config.errors import ConfigError
from strom.config.schema import invalid_value

__all__ = [
    "ANONYMOUS",
    "RULES_KEY",
    "CertificateDecodeError",
    "NameCase",
    "NoMatchingRule",
    "PrincipalRule",
    "certificate_subject",
    "distinguished_name",
    "map_principal",
    "parse_rules",
    "principal_name",
    "user_principal",
]

ANONYMOUS = "ANONYMOUS"
"""The principal name of a client that sent no certificate (Kafka's User:ANONYMOUS)."""
RULES_KEY = "ssl.principal.mapping.rules"


def user_principal(name: str) -> str:
    """`User:<name>`, as Kafka shows a principal (in ACLs, logs, DescribeAcls)."""
    return f"User:{name}"


# --- mapping rules --------------------------------------------------------------------


class NameCase(Enum):
    """What a rule does to the case of its result: its `/L` or `/U` suffix."""

    KEEP = ""
    LOWER = "L"
    UPPER = "U"


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One rule: DEFAULT (`pattern` None: the name unchanged) or `RULE:pattern/replacement/`.

    `replacement` holds literal text and group numbers, in order (`$1@x` is (1, "@x")).
    """

    text: str
    pattern: re.Pattern[str] | None
    replacement: tuple[str | int, ...] = ()
    case: NameCase = NameCase.KEEP

    def apply(self, name: str) -> str | None:
        """The rule's principal name for `name`, or None when its pattern does not match
        all of `name`. As Kafka does, every match of the pattern in `name` is replaced."""
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self._expand, name)
        if self.case is NameCase.LOWER:
            return result.lower()
        if self.case is NameCase.UPPER:
            return result.upper()
        return result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(
            piece if isinstance(piece, str) else match.group(piece) or ""
            for piece in self.replacement
        )


class NoMatchingRule(ValueError):
    """No rule of `ssl.principal.mapping.rules` maps this name: Kafka refuses the client."""


# A rule list is cut as Kafka cuts it: each rule is DEFAULT, or RULE: then a pattern and a
# replacement that end at the first slash not escaped by a backslash (so they may hold
# commas), then L or U; anything else up to the next comma is a malformed rule. Blank
# entries (",,", a trailing comma) are skipped.
_RULE_LIST = re.compile(
    r"""
    \s*
    (?P<rule>
        (?P<default>DEFAULT)
      | RULE:
        (?P<pattern>(?:\\.|[^\\/])*) /
        (?P<replacement>(?:\\.|[^\\/])*) /
        (?P<case>[LU]?) (?P<extra>.*?)
      | (?P<other>.*?)
    )
    \s*
    (?:(?P<comma>,)|\Z)
    """,
    re.VERBOSE | re.DOTALL | re.ASCII,
)


def parse_rules(text: str, *, key: str = RULES_KEY) -> tuple[PrincipalRule, ...]:
    """The rules of a `ssl.principal.mapping.rules` value; ConfigError naming `key` (the
    listener-prefixed name, if it is one) and the bad rule otherwise.

    Each rule is `DEFAULT` or `RULE:pattern/replacement/` with an optional `L` or `U`
    (lower or upper case the result). In a replacement, `$n` and `${name}` insert a group
    (`$n` takes as many digits as name an existing group; one naming no group is literal
    text, as in Kafka) and a backslash makes the next character literal (`\\/`, `\\$`).
    An empty value has no rules: every client with a certificate is refused.
    """
    stripped = text.strip()
    rules: list[PrincipalRule] = []
    position = 0
    while True:
        match = _RULE_LIST.match(stripped, position)
        assert match is not None  # the last alternative matches anything
        rule_text = match["rule"]
        number = len(rules) + 1
        if match["default"] is not None:
            rules.append(PrincipalRule(rule_text, None))
        elif match["pattern"] is not None:
            if match["extra"]:
                problem = f"unexpected {match['extra']!r} after the final '/' (only L or U)"
                raise invalid_value(key, text, f"rule {number} {rule_text!r}: {problem}")
            rules.append(_rule(rule_text, match, key, text, number))
        elif match["other"]:
            problem = "expected DEFAULT or RULE:pattern/replacement/ with an optional L or U"
            raise invalid_value(key, text, f"rule {number} {match['other']!r}: {problem}")
        if match["comma"] is None:
            return tuple(rules)
        position = match.end()


def _rule(rule_text: str, match: re.Match[str], key: str, text: str, number: int) -> PrincipalRule:
    def bad(problem: str) -> ConfigError:
        return invalid_value(key, text, f"rule {number} {rule_text!r}: {problem}")

    try:
        pattern = re.compile(match["pattern"])
    except re.error as exc:
        raise bad(f"bad pattern {match['pattern']!r}: {exc}") from None
    return PrincipalRule(
        rule_text,
        pattern,
        tuple(_replacement(match["replacement"], pattern, bad)),
        NameCase(match["case"]),
    )


def _replacement(
    text: str, pattern: re.Pattern[str], bad: Callable[[str], ConfigError]
) -> Iterator[str | int]:
    """The pieces of a Java replacement string: literal text and group numbers."""
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 1 == len(text):
                raise bad(f"replacement {text!r} ends with a lone backslash")
            literal.append(text[i + 1])
            i += 2
            continue
        if char != "$":
            literal.append(char)
            i += 1
            continue
        if text.startswith("{", i + 1):
            close = text.find("}", i + 2)
            name = text[i + 2 : close] if close != -1 else ""
            if name not in pattern.groupindex:
                raise bad(f"replacement {text!r}: '${{' must name a group of the pattern")
            group, i = pattern.groupindex[name], close + 1
        elif i + 1 < len(text) and text[i + 1].isdigit() and text[i + 1].isascii():
            group, i = int(text[i + 1]), i + 2
            if group > pattern.groups:  # no such group: Kafka keeps `$n` as text
                literal.append(text[i - 2 : i])
                continue
            while i < len(text) and text[i] in "0123456789":
                longer = group * 10 + int(text[i])
                if longer > pattern.groups:
                    break
                group, i = longer, i + 1
        else:
            raise bad(f"replacement {text!r}: '$' must be followed by a group number or {{name}}")
        if literal:
            yield "".join(literal)
            literal.clear()
        yield group
    if literal:
        yield "".join(literal)


def map_principal(rules: Sequence[PrincipalRule], distinguished_name: str) -> str:
    """The principal name the first rule matching `distinguished_name` gives;
    NoMatchingRule when none does."""
    for rule in rules:
        name = rule.apply(distinguished_name)
        if name is not None:
            return name
    written = ",".join(rule.text for rule in rules) or "(none)"
    raise NoMatchingRule(
        f"no rule of {RULES_KEY} matches {distinguished_name!r} (rules: {written})"
    )


def principal_name(rules: Sequence[PrincipalRule], certificate_der: bytes | None) -> str:
    """The principal name of a peer that sent this certificate (DER), or ANONYMOUS when it
    sent none; NoMatchingRule when no rule maps its subject."""
    if certificate_der is None:
        return ANONYMOUS
    return map_principal(rules, certificate_subject(certificate_der))


# --- distinguished names --------------------------------------------------------------

_KEYWORD_BY_OID = {
    "2.5.4.3": "CN",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.6": "C",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
"""The attributes RFC 2253 (and Java) write by keyword; all others by OID."""
_KEYWORD_BY_PYTHON_NAME = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
"""The same attributes by the (OpenSSL long) names `SSLSocket.getpeercert()` gives."""
_OID_BY_PYTHON_NAME = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "unstructuredName": "1.2.840.113549.1.9.2",
    "surname": "2.5.4.4",
    "serialNumber": "2.5.4.5",
    "title": "2.5.4.12",
    "description": "2.5.4.13",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
    "postOfficeBox": "2.5.4.18",
    "name": "2.5.4.41",
    "givenName": "2.5.4.42",
    "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44",
    "dnQualifier": "2.5.4.46",
    "pseudonym": "2.5.4.65",
    "organizationIdentifier": "2.5.4.97",
    "jurisdictionLocalityName": "1.3.6.1.4.1.311.60.2.1.1",
    "jurisdictionStateOrProvinceName": "1.3.6.1.4.1.311.60.2.1.2",
    "jurisdictionCountryName": "1.3.6.1.4.1.311.60.2.1.3",
}
"""OIDs of other attributes OpenSSL names, for `distinguished_name`."""
_ESCAPED = frozenset(',=+<>#;"\\')
"""Characters Java escapes with a backslash anywhere in a value (RFC 2253's, `=` and `#`)."""
_EDGE_SPACES = " \r"
_STRING_TAGS = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
"""UTF8String, PrintableString, T61String, IA5String, GeneralString, BMPString: the value
types Java writes as text (decoding their bytes as UTF-8, as Java does); others as #hex."""
_SEQUENCE, _SET, _OID, _VERSION = 0x30, 0x31, 0x06, 0xA0


def distinguished_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 text of the `subject` of `SSLSocket.getpeercert()`: its RDNs (tuples of
    (attribute, value) pairs, in certificate order), last first, as Java writes them.

    Attributes without an RFC 2253 keyword are written by OID when OpenSSL's name for them
    is known, else by the name Python gives, with their values as text: Java writes those
    values as `#` and the hex of their DER, which the dict does not hold
    (`certificate_subject` does that, from the certificate itself).
    """
    return ",".join(
        "+".join(f"{_python_attribute(attribute)}={_escape(value)}" for attribute, value in rdn)
        for rdn in reversed(subject)
    )


def _python_attribute(name: str) -> str:
    return _KEYWORD_BY_PYTHON_NAME.get(name) or _OID_BY_PYTHON_NAME.get(name) or name


def _escape(value: str) -> str:
    """A value as Java's RFC 2253 form writes it: each special character after a
    backslash, NUL as `\\00`, and every leading and trailing space (or CR) escaped."""
    text = "".join(
        "\\" + char if char in _ESCAPED else "\\00" if char == "\0" else char for char in value
    )
    body = text.strip(_EDGE_SPACES)
    if not body:
        return "".join("\\" + char for char in text)
    lead = len(text) - len(text.lstrip(_EDGE_SPACES))
    trail = len(text) - len(text.rstrip(_EDGE_SPACES))
    edges = (text[:lead], text[len(text) - trail :])
    escaped_lead, escaped_trail = ("".join("\\" + char for char in edge) for edge in edges)
    return escaped_lead + body + escaped_trail


class CertificateDecodeError(ValueError):
    """Bytes that are not a DER certificate (or not the parts of one read here)."""


def certificate_subject(certificate_der: bytes) -> str:
    """The subject of a DER certificate as Java's `X500Principal.getName()` writes it:
    RDNs last first, comma separated; RFC 2253 keywords (CN, L, ST, O, OU, C, STREET, DC,
    UID) with their values as escaped text; other attributes as OID=#<hex of the DER
    value>; the values of a multi-valued RDN joined by `+`."""
    certificate = _element(certificate_der, 0, len(certificate_der), _SEQUENCE)
    tbs = _element(certificate_der, certificate.content, certificate.end, _SEQUENCE)
    fields = list(_elements(certificate_der, tbs.content, tbs.end))
    if fields and fields[0].tag == _VERSION:
        fields.pop(0)
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4].tag != _SEQUENCE:
        raise CertificateDecodeError("the certificate has no subject where one belongs")
    return _name(certificate_der, fields[4])


def _name(der: bytes, name: _Element) -> str:
    rdns: list[str] = []
    for rdn in _elements(der, name.content, name.end):
        if rdn.tag != _SET:
            raise CertificateDecodeError("a name holds something other than a SET of attributes")
        rdns.append(
            "+".join(_attribute(der, pair) for pair in _elements(der, rdn.content, rdn.end))
        )
    return ",".join(reversed(rdns))


def _attribute(der: bytes, pair: _Element) -> str:
    parts = list(_elements(der, pair.content, pair.end))
    if pair.tag != _SEQUENCE or len(parts) != 2 or parts[0].tag != _OID:
        raise CertificateDecodeError("an attribute is not an OID and a value")
    oid, value = _oid_text(der[parts[0].content : parts[0].end]), parts[1]
    keyword = _KEYWORD_BY_OID.get(oid)
    if keyword is None or value.tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{der[value.start : value.end].hex()}"
    return f"{keyword}={_escape(der[value.content : value.end].decode('utf-8', 'replace'))}"


def _oid_text(content: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs or content[-1] & 0x80:
        raise CertificateDecodeError("an attribute's OID is malformed")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


class _Element(NamedTuple):
    """Where one DER element lies: its tag byte at `start`, its content from `content`."""

    tag: int
    start: int
    content: int
    end: int


def _elements(der: bytes, start: int, end: int) -> Iterator[_Element]:
    """Each DER element in der[start:end], in order."""
    while start < end:
        element = _element(der, start, end, None)
        yield element
        start = element.end


def _element(der: bytes, start: int, end: int, expected: int | None) -> _Element:
    if end - start < 2:
        raise CertificateDecodeError("truncated DER")
    tag, length = der[start], der[start + 1]
    if expected is not None and tag != expected:
        raise CertificateDecodeError(f"expected DER tag {expected:#04x}, found {tag:#04x}")
    if tag & 0x1F == 0x1F:
        raise CertificateDecodeError("multi-byte DER tags are not used in certificate names")
    content = start + 2
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4 or content + size > end:
            raise CertificateDecodeError("bad DER length")
        length = int.from_bytes(der[content : content + size], "big")
        content += size
    if content + length > end:
        raise CertificateDecodeError("truncated DER")
    return _Element(tag, start, content, content + length)
