"""ssl.principal.mapping.rules (Kafka's SslPrincipalMapper, KIP-371) and the RFC 2253
names of certificate subjects, as Java's X500Principal.getName() writes them."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.config.errors import ConfigError
from strom.security import principal
from strom.security.principal import (
    ANONYMOUS,
    CertificateDecodeError,
    NameCase,
    NoMatchingRule,
    certificate_subject,
    distinguished_name,
    map_principal,
    parse_rules,
    principal_name,
    user_principal,
)

KAFKA_DOC_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "DEFAULT"
)

# --- parsing ---------------------------------------------------------------------------


def test_kafka_s_documented_rules_parse_into_three_rules() -> None:
    first, second, default = parse_rules(KAFKA_DOC_RULES)
    assert first.pattern is not None and first.pattern.pattern == "^CN=(.*?),OU=ServiceUsers.*$"
    assert first.replacement == (1,) and first.case is NameCase.KEEP
    assert second.replacement == (1, "@", 2) and second.case is NameCase.LOWER
    assert default.pattern is None and default.text == "DEFAULT"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("DEFAULT", ["DEFAULT"]),
        ("RULE://", ["RULE://"]),
        ("RULE:/.*/L", ["RULE:/.*/L"]),
        ("  RULE:// ,  DEFAULT  ", ["RULE://", "DEFAULT"]),
        ("  RULE:   /     / ,  DEFAULT  ", ["RULE:   /     /", "DEFAULT"]),
        ("  RULE:  /     /U   ,DEFAULT  ", ["RULE:  /     /U", "DEFAULT"]),
        (",   , , ,      , , ,   ", []),
        (",,RULE://,,,DEFAULT,,", ["RULE://", "DEFAULT"]),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", ["RULE:   /  /U", "DEFAULT"]),
    ],
)
def test_rules_are_cut_as_kafka_cuts_them(text: str, expected: list[str]) -> None:
    assert [rule.text for rule in parse_rules(text)] == expected


def test_commas_and_rule_words_inside_patterns_and_replacements_stay_in_their_rule() -> None:
    text = (
        r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,"
        r"RULE:, DEFAULT, /DEFAULT/,DEFAULT"
    )
    rules = parse_rules(text)
    assert [(r.pattern.pattern if r.pattern else None, r.replacement, r.case) for r in rules] == [
        (",RULE:,", (",RULE:,/",), NameCase.UPPER),
        (",", ("RULE:,",), NameCase.KEEP),
        (",RULE:,", ("L,RULE:,",), NameCase.LOWER),
        (", DEFAULT, ", ("DEFAULT",), NameCase.KEEP),
        (None, (), NameCase.KEEP),
    ]


def test_escaped_slashes_belong_to_the_pattern_and_replacement() -> None:
    (rule,) = parse_rules(r"RULE:\/\\\(\)\n\t/\/\//")
    assert rule.pattern is not None and rule.pattern.pattern == r"\/\\\(\)\n\t"
    assert rule.replacement == ("//",)
    assert [rule.text for rule in parse_rules(r"RULE:\**\/+/*/L,RULE:\/*\**/**/")] == [
        r"RULE:\**\/+/*/L",
        r"RULE:\/*\**/**/",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("default", "expected DEFAULT or RULE:"),
        ("DEFAUL", "expected DEFAULT or RULE:"),
        ("DEFAULT/L", "expected DEFAULT or RULE:"),
        ("RULE:CN=(.*?),OU=ServiceUsers.*/$1", "expected DEFAULT or RULE:"),
        ("rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "expected DEFAULT or RULE:"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "unexpected '/U'"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "expected DEFAULT or RULE:"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/LU", "expected DEFAULT or RULE:"),
        ("DEFAULT,RULE:^CN=(.*?)$/$1/LU", "rule 2"),
        ("RULE:^CN=(.*$/$1/", "bad pattern"),
        ("RULE:^CN=(.*)$/$/", "'$' must be followed by a group number"),
        ("RULE:^CN=(.*)$/${user}/", "'${' must name a group"),
        ("RULE:^CN=(.*)$/x\\/", "expected DEFAULT or RULE:"),
    ],
)
def test_bad_rules_name_the_key_the_rule_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules(text)
    message = str(caught.value)
    assert caught.value.key == "ssl.principal.mapping.rules"
    assert message.startswith(f"invalid value {text!r} for 'ssl.principal.mapping.rules': ")
    assert problem in message


def test_a_listener_s_rules_are_reported_under_its_prefixed_key() -> None:
    key = "listener.name.ssl.ssl.principal.mapping.rules"
    with pytest.raises(ConfigError) as caught:
        parse_rules("nonsense", key=key)
    assert caught.value.key == key


# --- mapping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "CN=kafka-server1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown",
            "kafka-server1",
        ),
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("CN=alice,OU=eng,O=strom,C=US", "CN=alice,OU=eng,O=strom,C=US"),
    ],
)
def test_kafka_s_documented_example(name: str, expected: str) -> None:
    assert map_principal(parse_rules(KAFKA_DOC_RULES), name) == expected


def test_kafka_s_mapper_examples() -> None:
    rules = parse_rules(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert map_principal(rules, "CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert map_principal(rules, "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert map_principal(rules, "cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert map_principal(rules, "cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    unmapped = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert map_principal(rules, unmapped) == unmapped


def test_an_escaped_comma_in_a_name_can_be_matched() -> None:
    rules = parse_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert map_principal(rules, r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_the_first_rule_whose_pattern_matches_all_of_the_name_wins() -> None:
    rules = parse_rules("RULE:CN=a/partial/,RULE:CN=a.*/first/,RULE:.*/second/")
    assert map_principal(rules, "CN=abc") == "first"


def test_group_references_follow_java() -> None:
    (rule,) = parse_rules(r"RULE:^CN=(.*?),(.*)$/$1\/$3$12$21\$1/")
    assert rule.replacement == (1, "/$3", 1, "2", 2, "1$1")  # $3: no such group
    (named,) = parse_rules("RULE:^CN=(?P<user>[^,]*),.*$/${user}/")
    assert map_principal([named], "CN=bob,O=x") == "bob"
    (whole,) = parse_rules("RULE:^CN=([^,]*).*$/<$0>/")
    assert map_principal([whole], "CN=bob,O=x") == "<CN=bob,O=x>"


def test_an_unmatched_optional_group_inserts_nothing() -> None:
    assert map_principal(parse_rules("RULE:^CN=(x)?(.*)$/[$1]$2/"), "CN=bob") == "[]bob"


def test_no_matching_rule_is_a_typed_error_naming_the_name() -> None:
    with pytest.raises(NoMatchingRule, match="CN=eve") as caught:
        map_principal(parse_rules("RULE:^CN=bob$/bob/"), "CN=eve")
    assert isinstance(caught.value, ValueError)
    with pytest.raises(NoMatchingRule):
        map_principal(parse_rules(""), "CN=anyone")


def test_principal_name_without_a_certificate_is_anonymous() -> None:
    assert principal_name(parse_rules("DEFAULT"), None) == ANONYMOUS
    assert user_principal(ANONYMOUS) == "User:ANONYMOUS"


# --- names from getpeercert() ------------------------------------------------------------


def test_the_rdns_come_last_first_with_short_names() -> None:
    subject = (
        (("countryName", "US"),),
        (("organizationName", "strom"),),
        (("commonName", "alice"),),
    )
    assert distinguished_name(subject) == "CN=alice,O=strom,C=US"


def test_every_rfc_2253_keyword() -> None:
    subject = tuple(
        ((name, "v"),)
        for name in (
            "domainComponent",
            "countryName",
            "stateOrProvinceName",
            "localityName",
            "streetAddress",
            "organizationName",
            "organizationalUnitName",
            "commonName",
            "userId",
        )
    )
    assert distinguished_name(subject) == "UID=v,CN=v,OU=v,O=v,STREET=v,L=v,ST=v,C=v,DC=v"


def test_a_multi_valued_rdn_is_joined_with_plus() -> None:
    subject = ((("organizationName", "strom"),), (("commonName", "alice"), ("userId", "a1")))
    assert distinguished_name(subject) == "CN=alice+UID=a1,O=strom"


def test_other_attributes_go_by_oid_or_by_the_name_python_gives() -> None:
    subject = ((("emailAddress", "a@b"),), (("1.2.3.4", "x"),), (("madeUpName", "y"),))
    assert distinguished_name(subject) == "madeUpName=y,1.2.3.4=x,1.2.840.113549.1.9.1=a@b"


@pytest.mark.parametrize("name", sorted(principal._OID_BY_PYTHON_NAME))
def test_the_oid_table_agrees_with_openssl(name: str) -> None:
    # ssl._ASN1Object is private, but it is how OpenSSL's own table can be asked.
    found = ssl._ASN1Object.fromname(name)
    assert found.longname == name
    assert found.oid == principal._OID_BY_PYTHON_NAME[name]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("a,b", r"a\,b"),
        ("a+b", r"a\+b"),
        ('say "hi"', r"say \"hi\""),
        ("back\\slash", r"back\\slash"),
        ("<tag>;", r"\<tag\>\;"),
        ("a=b", r"a\=b"),  # Java escapes = and # anywhere, beyond RFC 2253
        ("#1", r"\#1"),
        ("a#", r"a\#"),
        (" lead", r"\ lead"),
        ("trail ", r"trail\ "),
        ("  both  ", r"\ \ both\ \ "),
        (" ", "\\ "),
        ("mid dle", "mid dle"),
        ("nul\0", r"nul\00"),
        ("ünïcødé", "ünïcødé"),
    ],
)
def test_values_are_escaped_as_java_escapes_them(value: str, written: str) -> None:
    assert distinguished_name(((("commonName", value),),)) == f"CN={written}"


_SPECIAL = ',=+<>#;"\\ \r'


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            current.append(char)
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] != "\\":
            out.append(value[i])
            i += 1
        elif value[i + 1] in _SPECIAL:
            out.append(value[i + 1])
            i += 2
        else:  # two hex digits: Java writes NUL as \00
            out.append(chr(int(value[i + 1 : i + 3], 16)))
            i += 3
    return "".join(out)


_attribute = st.sampled_from(["commonName", "organizationName", "userId", "emailAddress"])
_value = st.text(
    alphabet=st.one_of(st.sampled_from([*_SPECIAL, "\0"]), st.characters()), min_size=1
)
_rdns = st.lists(
    st.lists(st.tuples(_attribute, _value), min_size=1, max_size=3), min_size=1, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(_rdns)
def test_escaping_keeps_rdns_and_values_apart(rdns: list[list[tuple[str, str]]]) -> None:
    written = distinguished_name(rdns)
    found = _split_unescaped(written, ",")
    assert len(found) == len(rdns)
    for text, rdn in zip(found, reversed(rdns), strict=True):
        pairs = _split_unescaped(text, "+")
        assert len(pairs) == len(rdn)
        assert [_unescape(pair.partition("=")[2]) for pair in pairs] == [v for _, v in rdn]


# --- names from the certificate itself -----------------------------------------------------


def _certificate(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer")]))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(Encoding.DER)


def test_the_subject_of_a_certificate_as_java_writes_it() -> None:
    subject = x509.Name.from_rfc4514_string(
        r"CN=al\,ice,OU=eng,O=strom,L=Oslo,ST=O,C=NO,DC=example"
    )
    assert (
        certificate_subject(_certificate(subject))
        == r"CN=al\,ice,OU=eng,O=strom,L=Oslo,ST=O,C=NO,DC=example"
    )


def test_attributes_without_a_keyword_are_written_as_the_hex_of_their_der() -> None:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b"),  # IA5String: tag 0x16
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    assert certificate_subject(_certificate(subject)) == "CN=alice,1.2.840.113549.1.9.1=#1603614062"


def test_a_multi_valued_rdn_in_a_certificate() -> None:
    rdn = x509.RelativeDistinguishedName(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
            x509.NameAttribute(NameOID.USER_ID, "a1"),
        ]
    )
    der = _certificate(x509.Name([rdn]))
    assert sorted(certificate_subject(der).split("+")) == ["CN=alice", "UID=a1"]


def test_principal_name_maps_the_certificate_subject() -> None:
    der = _certificate(x509.Name.from_rfc4514_string("CN=alice,OU=eng,O=strom,C=US"))
    rules = parse_rules("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U")
    assert principal_name(rules, der) == "ALICE@ENG"


@pytest.mark.parametrize("der", [b"", b"\x30\x03\x02\x01", b"\x04\x00", b"\x30\x00"])
def test_bytes_that_are_not_a_certificate_are_a_typed_error(der: bytes) -> None:
    with pytest.raises(CertificateDecodeError):
        certificate_subject(der)
