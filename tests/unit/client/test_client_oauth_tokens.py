"""Unsecured OAUTHBEARER tokens as librdkafka makes them from sasl.oauthbearer.config,
checked by strom's broker, and the SASL extensions of sasl.oauthbearer.extensions."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.client.oauth_tokens import (
    BearerToken,
    UnsecuredLogin,
    parse_extensions,
    parse_unsecured_config,
    unsecured_token,
)
from strom.security.jwt_validation import UnsecuredJwtSettings, validate_unsecured
from strom.security.oauthbearer import client_initial_response, parse_client_initial_response

NOW_MS = 1_800_000_000_123


def claims_of(token: str) -> dict[str, Any]:
    header, payload, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    assert signature == ""
    parsed: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return parsed


def test_librdkafkas_example_config() -> None:
    login = parse_unsecured_config(
        "principalClaimName=azp principal=admin scopeClaimName=roles scope=role1,role2 "
        "lifeSeconds=600"
    )
    assert login == UnsecuredLogin("admin", "azp", "roles", ("role1", "role2"), 600)
    token = unsecured_token(login, NOW_MS)
    # The header librdkafka writes, byte for byte; times in seconds with milliseconds.
    assert token.value.startswith("eyJhbGciOiJub25lIn0.")
    assert claims_of(token.value) == {
        "azp": "admin",
        "iat": 1_800_000_000.123,
        "exp": 1_800_000_600.123,
        "roles": ["role1", "role2"],
    }
    assert (token.principal, token.obtained_at_ms) == ("admin", NOW_MS)
    assert token.expires_at_ms == NOW_MS + 600_000
    assert dict(token.extensions) == {}


def test_defaults_and_extensions() -> None:
    login = parse_unsecured_config("  principal=alice  extension_traceId=123 extension_a=b ")
    assert login == UnsecuredLogin("alice", extensions=(("traceId", "123"), ("a", "b")))
    token = unsecured_token(login, NOW_MS)
    assert claims_of(token.value) == {
        "sub": "alice",
        "iat": 1_800_000_000.123,
        "exp": 1_800_003_600.123,
    }
    assert dict(token.extensions) == {"traceId": "123", "a": "b"}
    assert "eyJ" not in repr(token)  # the token stays out of logs


def test_the_scope_drops_empty_items_and_repeats() -> None:
    assert parse_unsecured_config("principal=a scope=,x,,y,x,").scope == ("x", "y")


def test_strom_s_broker_accepts_the_token_with_its_principal_and_scope() -> None:
    login = parse_unsecured_config("principal=svc scope=kafka,read extension_tenant=t1")
    token = unsecured_token(login, NOW_MS)
    settings = UnsecuredJwtSettings.from_options({"unsecuredValidatorRequiredScope": "kafka"})
    valid = validate_unsecured(token.value, settings, NOW_MS + 5)
    assert (valid.principal_name, valid.scope) == ("svc", frozenset({"kafka", "read"}))
    assert valid.expires_at_ms == token.expires_at_ms
    message = client_initial_response(token.value, extensions=token.extensions)
    parsed = parse_client_initial_response(message)
    assert (parsed.token, dict(parsed.extensions)) == (token.value, {"tenant": "t1"})


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("", "has no principal=<name>"),
        ("scope=a lifeSeconds=5", "has no principal=<name>"),
        ("principal=a principal=b", "principal= is given more than once"),
        ("principal=", "principal= is empty"),
        ("principal=a scope=", "scope= is empty"),
        ('principal=a"b', 'principal= must not hold a double quote (")'),
        ('principal=a scopeClaimName=r"', "scopeClaimName= must not hold a double quote"),
        ("principal=a lifeSeconds=soon", "lifeSeconds=soon is not a whole number"),
        ("principal=a lifeSeconds=-5", "lifeSeconds=-5 is not a whole number"),
        ("principal=a lifeSeconds=0", "lifeSeconds=0 is not between 1 and 2147483647"),
        ("principal=a lifeSeconds=2147483648", "is not between 1 and 2147483647"),
        ("principal=a user=b", "unknown entry 'user=b'; it takes principal="),
        ("Principal=a", "unknown entry 'Principal=a'"),
        ("principal=a extension_trace", "'extension_trace' is not extension_<NAME>=<value>"),
        ("principal=a extension_=1", "the extension name '' is not letters"),
        ("principal=a extension_trace_id=1", "the extension name 'trace_id' is not letters"),
        ("principal=a extension_auth=x", "the extension name auth is reserved"),
        ("principal=a extension_t=", "the value of extension t must be printable ASCII"),
        ("principal=a extension_t=caf\u00e9", "the value of extension t must be printable"),
        ("principal=a principalClaimName=exp", "iat and exp are set by the token itself"),
        ("principal=a scopeClaimName=sub", "principalClaimName and scopeClaimName must differ"),
    ],
)
def test_what_librdkafka_refuses_is_refused_naming_the_setting(config: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_unsecured_config(config)
    assert str(caught.value).startswith("sasl.oauthbearer.config")
    assert problem in str(caught.value)


@given(st.text(max_size=80))
def test_any_config_gives_a_token_or_a_value_error(text: str) -> None:
    try:
        login = parse_unsecured_config(text)
    except ValueError:
        return
    token = unsecured_token(login, NOW_MS)
    assert token.value.isascii() and token.principal == login.principal
    client_initial_response(token.value, extensions=token.extensions)  # sendable as it is


# What the config's grammar can hold: no space, no double quote; a scope item no comma.
# The broker trims principals and scope items, so the ones here have nothing to trim.
def trimmed(excluded: str) -> st.SearchStrategy[str]:
    characters = st.characters(blacklist_characters=excluded, blacklist_categories=("Cs",))
    return st.text(characters, min_size=1).filter(lambda text: text == text.strip() != "")


words = trimmed(' "')
scopes = st.lists(trimmed(' ",'), max_size=4)
names = st.text(st.characters(min_codepoint=65, max_codepoint=122).filter(str.isalpha), min_size=1)
values = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)


@given(
    principal=words,
    scope=scopes,
    life_seconds=st.integers(1, 2**31 - 1),
    extensions=st.dictionaries(names.filter(lambda n: n != "auth"), values, max_size=3),
    now_ms=st.integers(0, 2**42),
)
def test_any_principal_and_scope_reach_strom_s_broker_as_given(
    principal: str, scope: list[str], life_seconds: int, extensions: dict[str, str], now_ms: int
) -> None:
    parts = [f"principal={principal}", f"lifeSeconds={life_seconds}"]
    parts += [f"scope={','.join(scope)}"] if scope else []
    parts += [f"extension_{name}={value}" for name, value in extensions.items()]
    token = unsecured_token(parse_unsecured_config(" ".join(parts)), now_ms)
    valid = validate_unsecured(token.value, UnsecuredJwtSettings(), now_ms)
    assert valid.principal_name == principal
    assert valid.scope == frozenset(scope)
    assert valid.expires_at_ms == now_ms + life_seconds * 1000
    parsed = parse_client_initial_response(
        client_initial_response(token.value, extensions=token.extensions)
    )
    assert dict(parsed.extensions) == extensions


def test_a_token_is_replaced_once_80_percent_of_its_life_has_passed() -> None:
    token = BearerToken("t", "alice", expires_at_ms=11_000, obtained_at_ms=1_000)
    assert not token.refresh_due(1_000)
    assert not token.refresh_due(8_999)
    assert token.refresh_due(9_000)
    assert token.refresh_due(20_000)


def test_sasl_oauthbearer_extensions() -> None:
    where = "sasl.oauthbearer.extensions"
    assert parse_extensions("", where) == ()
    assert parse_extensions(" supportFeatureX=true, organizationId=sales-emea ,", where) == (
        ("supportFeatureX", "true"),
        ("organizationId", "sales-emea"),
    )
    assert parse_extensions("a=1,a=2", where) == (("a", "2"),)
    assert parse_extensions("a=x=y", where) == (("a", "x=y"),)
    for text, problem in [
        ("a", "'a' is not name=value"),
        ("auth=x", "the extension name auth is reserved"),
        ("a-b=1", "the extension name 'a-b' is not letters"),
        ("a=", "the value of extension a must be printable ASCII"),
    ]:
        with pytest.raises(ValueError, match=f"^{where}: .*{problem}"):
            parse_extensions(text, where)
