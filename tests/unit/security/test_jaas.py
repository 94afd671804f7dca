"""Kafka's `sasl.jaas.config` syntax (its JaasConfig, read with Java's StreamTokenizer) and
the PLAIN users a config holds."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.config.errors import ConfigError
from strom.security.jaas import (
    PLAIN_LOGIN_MODULE,
    ControlFlag,
    JaasEntry,
    parse_jaas_config,
    plain_users,
)

KEY = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
PLAIN_BROKER = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
"""Kafka's documented broker config for SASL/PLAIN."""
SCRAM = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
    'password="admin-secret";'
)
OAUTHBEARER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="admin";'
)
KERBEROS = (
    "com.sun.security.auth.module.Krb5LoginModule required\n"
    "    useKeyTab=true\n"
    "    storeKey=true\n"
    '    keyTab="/etc/security/keytabs/kafka_server.keytab"\n'
    '    principal="kafka/kafka1.hostname.com@EXAMPLE.COM";'
)


def parse(text: str) -> tuple[JaasEntry, ...]:
    return parse_jaas_config(text, key=KEY)


def only(text: str) -> JaasEntry:
    (entry,) = parse(text)
    return entry


# --- Kafka's documented configs ---------------------------------------------------------


def test_kafka_s_plain_broker_config() -> None:
    entry = only(PLAIN_BROKER)
    assert entry.login_module == PLAIN_LOGIN_MODULE
    assert entry.control_flag is ControlFlag.REQUIRED and entry.control_flag == "required"
    assert dict(entry.options) == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }


@pytest.mark.parametrize(
    ("text", "module", "options"),
    [
        (
            SCRAM,
            "org.apache.kafka.common.security.scram.ScramLoginModule",
            {"username": "admin", "password": "admin-secret"},
        ),
        (
            OAUTHBEARER,
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            {"unsecuredLoginStringClaim_sub": "admin"},
        ),
        (
            KERBEROS,
            "com.sun.security.auth.module.Krb5LoginModule",
            {
                "useKeyTab": "true",
                "storeKey": "true",
                "keyTab": "/etc/security/keytabs/kafka_server.keytab",
                "principal": "kafka/kafka1.hostname.com@EXAMPLE.COM",
            },
        ),
        ("test.testConfigNoOptions required;", "test.testConfigNoOptions", {}),
    ],
)
def test_kafka_s_other_documented_configs(text: str, module: str, options: dict[str, str]) -> None:
    entry = only(text)
    assert (entry.login_module, dict(entry.options)) == (module, options)


@pytest.mark.parametrize("flag", ["required", "requisite", "sufficient", "optional", "REQUIRED"])
def test_every_control_flag_in_any_case(flag: str) -> None:
    entry = only(f"test.Module {flag} propName=propValue;")
    assert entry.control_flag is ControlFlag(flag.lower())
    assert dict(entry.options) == {"propName": "propValue"}


def test_several_entries_keep_their_order() -> None:
    text = " ".join(
        f"test.Module{i} {flag} index=Index{i} module=Module{i};"
        for i, flag in enumerate(["required", "sufficient", "optional"])
    )
    entries = parse(text)
    assert [e.login_module for e in entries] == ["test.Module0", "test.Module1", "test.Module2"]
    assert [e.control_flag for e in entries] == [
        ControlFlag.REQUIRED,
        ControlFlag.SUFFICIENT,
        ControlFlag.OPTIONAL,
    ]
    assert dict(entries[2].options) == {"index": "Index2", "module": "Module2"}


# --- names and values -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ('"prop value"', "prop value"),
        ('"value1 = 1, value2 = 2"', "value1 = 1, value2 = 2"),
        ('"3"', "3"),
        ('""', ""),
        ("'single quoted'", "single quoted"),
        ("'has \"double\" quotes'", 'has "double" quotes'),
        (r'"a\"b"', 'a"b'),
        (r'"back\\slash"', "back\\slash"),
        (r'"tab\there"', "tab\there"),
        (r'"\n\r\f\b\a\v"', "\n\r\f\b\a\v"),
        (r'"\q"', "q"),  # an unknown escape is the character itself
        (r'"\101\60\0"', "A0\0"),  # octal
        (r'"\1011"', "A1"),  # at most three octal digits
        (r'"\477"', "'7"),  # three only when the first is 0-3
        (r'"semi;colon"', "semi;colon"),
        ('"pässwörd ✓"', "pässwörd ✓"),
        ("admin-secret", "admin-secret"),
        ("a1.b2-c_$d", "a1.b2-c_$d"),
        ("_under", "_under"),
        ("$dollar", "$dollar"),
        ("ünïcode", "ünïcode"),
        ("true", "true"),
    ],
)
def test_option_values(written: str, value: str) -> None:
    assert dict(only(f"test.Module required key={written};").options) == {"key": value}


def test_a_quoted_option_name() -> None:
    assert dict(only('test.M required "prop name"=propValue;').options) == {
        "prop name": "propValue"
    }


def test_whitespace_and_comments_between_tokens() -> None:
    text = (
        "// the broker's users\n"
        "test.M /* flag: */ required\r\n"
        '\tuser_a = "x" // first\n'
        "  user_b= y /* second */ ;"
    )
    assert dict(only(text).options) == {"user_a": "x", "user_b": "y"}


def test_a_repeated_option_keeps_its_last_value() -> None:
    assert dict(only("test.M required a=x a=y;").options) == {"a": "y"}


def test_no_space_is_needed_around_equals_and_semicolons() -> None:
    entries = parse('a.A required x="1";b.B optional;')
    assert [(e.login_module, dict(e.options)) for e in entries] == [
        ("a.A", {"x": "1"}),
        ("b.B", {}),
    ]


def test_entries_are_immutable_hashable_and_never_show_values() -> None:
    entry = only(PLAIN_BROKER)
    assert isinstance(entry.options, MappingProxyType)
    with pytest.raises(TypeError):
        entry.options["user_eve"] = "x"  # type: ignore[index]
    assert entry == only(PLAIN_BROKER) and hash(entry) == hash(only(PLAIN_BROKER))
    assert "secret" not in repr(entry) and "user_alice" in repr(entry)
    built = JaasEntry("m", ControlFlag.OPTIONAL, {"k": "v"})
    assert isinstance(built.options, MappingProxyType) and dict(built.options) == {"k": "v"}


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no login module"),
        ("  // only a comment\n", "no login module"),
        ("test.loginModule option1=value1;", "entry 1: the control flag"),
        ("  required option1=value1;", "entry 1: the control flag"),
        ("test.M { option1=3;", "entry 1: the control flag"),
        ("test.M", "entry 1 has no control flag"),
        ("test.M mandatory;", "entry 1: the control flag at character 8 must be one of"),
        ("test.M required option1=value1", "entry 1 does not end with ';'"),
        ("test.M required", "entry 1 does not end with ';'"),
        ("a.A required x=y; b.B required x=y", "entry 2 does not end with ';'"),
        ("test.M required option1;", "entry 1, option 1 (character 17) has no value"),
        ("test.M required a=b option2;", "entry 1, option 2 (character 21) has no value"),
        ("test.M required a=;", "option 1 (character 17) has no value"),
        (
            "test.M required a=b:c;",
            "option 2 (character 20): expected an option name or ';', found a character (quote",
        ),
        ("test.M required a=@x;", "option 1 (character 17) has no value"),
        ("test.M required a=3;", "has a bare number for its value: quote it"),
        ("test.M required a=-3;", "has a bare number for its value"),
        ("test.M required a=.5;", "has a bare number for its value"),
        ("test.M required =b;", "expected an option name or ';', found a character"),
        ("test.M required 1=b;", "expected an option name or ';', found a bare number"),
        ('test.M required a="open;', "quoted string at character 19 is not closed on its line"),
        ('test.M required a="open\n";', "is not closed on its line"),
        ('test.M required a="end\\', "ends with a lone backslash"),
        ("test.M required /* open", "the comment at character 17 is not closed by */"),
        ('"" required;', "entry 1 (character 1) must start with a login module class name"),
        ("= required;", "must start with a login module class name, not a character"),
        ("a.A required x=y; ; b.B required;", "entry 2 (character 19) must start with"),
        ("a.A required x=y b.B required;", "option 2 (character 18) has no value"),
    ],
)
def test_syntax_errors_name_the_key_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert caught.value.key == KEY
    assert KEY in str(caught.value)
    assert problem in str(caught.value)


def test_a_missing_semicolon_between_entries_is_hinted() -> None:
    with pytest.raises(ConfigError, match="or a ';' before the next entry"):
        parse("a.A required x=y b.B required;")


SECRETS = ["hunter2-pw", "s3cr3t-value", "pa55word"]
BROKEN = [
    'test.M required user_a="hunter2-pw" user_b;',
    'test.M required user_a="hunter2-pw" user_b="s3cr3t-value"',
    "test.M required user_a=hunter2-pw user_b=s3cr3t-value pa55word;",
    'test.M required user_a="hunter2-pw" user_b="s3cr3t-value',
    "test.M hunter2-pw user_a=s3cr3t-value;",
    'test.M required user_a="hunter2-pw" = "s3cr3t-value";',
    "test.M required user_a=hunter2-pw:s3cr3t-value;",
    'hunter2-pw "s3cr3t-value";',
    "test.M required user_a=hunter2-pw pa55word /* s3cr3t-value",
]


@pytest.mark.parametrize("text", BROKEN)
def test_no_error_message_shows_a_password(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert not any(secret in str(caught.value) for secret in SECRETS), str(caught.value)


_NAMES = st.text(alphabet="abcdefxyz_$", min_size=1, max_size=8)
_VALUES = st.text(max_size=12)


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r") + '"'


@settings(max_examples=200, deadline=None)
@given(options=st.dictionaries(_NAMES, _VALUES, max_size=5))
def test_any_quoted_value_reads_back(options: dict[str, str]) -> None:
    written = " ".join(f"{name}={_quoted(value)}" for name, value in options.items())
    assert dict(only(f"test.M required {written};").options) == options


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_parses_or_raises_config_error(text: str) -> None:
    try:
        entries = parse(text)
    except ConfigError as exc:
        assert exc.key == KEY
    else:
        assert entries


# --- PLAIN users ------------------------------------------------------------------------


def test_plain_users_are_the_user_options_only() -> None:
    users = plain_users(parse(PLAIN_BROKER), key=KEY)
    assert dict(users) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_plain_users_skip_other_modules_and_the_first_entry_wins() -> None:
    entries = parse(
        f'{SCRAM} {PLAIN_LOGIN_MODULE} optional user_bob="first"; '
        f'{PLAIN_LOGIN_MODULE} optional user_bob="second" user_carol="c" user_="nameless";'
    )
    assert dict(plain_users(entries, key=KEY)) == {"bob": "first", "carol": "c"}


def test_plain_users_may_be_none() -> None:
    assert dict(plain_users(parse(f'{PLAIN_LOGIN_MODULE} required username="a";'), key=KEY)) == {}


def test_plain_users_need_a_plain_login_module() -> None:
    with pytest.raises(ConfigError) as caught:
        plain_users(parse(SCRAM), key=KEY)
    message = str(caught.value)
    assert caught.value.key == KEY and PLAIN_LOGIN_MODULE in message
    assert "ScramLoginModule" in message and "admin-secret" not in message
    with pytest.raises(ConfigError, match="found: none"):
        plain_users((), key=KEY)
    with pytest.raises(ConfigError):  # the exact class name only
        plain_users(parse("PlainLoginModule required user_a=b;"), key=KEY)
