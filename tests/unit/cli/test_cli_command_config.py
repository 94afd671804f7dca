"""--command-config: the properties file, how its settings reach librdkafka, and the TLS
and SASL they give strom's own client. No sockets: every client here is refused before
it connects."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import typer
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from strom.cli.common import (
    CommandError,
    ConnectionSettings,
    ErrorRecorder,
    ExitCode,
    parse_command_config,
    read_command_config,
    refused_settings_reason,
)
from strom.cli.main import app
from strom.cli.wire import client_security, run_session

runner = CliRunner()

CLIENT_PROPERTIES = """\
# TLS to the brokers
security.protocol=SSL
! a comment in Java's other style
   ssl.ca.location = /etc/kafka/ca.pem

sasl.mechanism: PLAIN
sasl.jaas.config=a=b:c # not a comment
client.id=first
client.id=billing-tools
"""


def test_properties_lines_comments_and_blank_lines() -> None:
    assert parse_command_config(CLIENT_PROPERTIES) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "a=b:c # not a comment",
        "client.id": "billing-tools",  # a later line wins
    }
    assert parse_command_config("") == {}
    assert parse_command_config("a=1\r\nb : 2\rc=\n  # x=y\n") == {"a": "1", "b": "2", "c": ""}
    assert parse_command_config("url=host:9092") == {"url": "host:9092"}
    assert parse_command_config("k: v=w") == {"k": "v=w"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a=1\nclient.id\n", "line 2: expected key=value, got 'client.id'"),
        ("=value", "line 1: no key before '='"),
        ("# header\n\n  : value", "line 3: no key before ':'"),
    ],
)
def test_a_line_without_a_key_is_a_usage_error_with_its_number(text: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_command_config(text)
    assert (caught.value.exit_code, caught.value.message) == (ExitCode.USAGE, message)


keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=30)
# Any printable text on one line, blanks inside but not around (the parser trims them).
values = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40).filter(
    lambda value: value == value.strip()
)
separators = st.sampled_from(["=", " = ", ": ", ":", "\t=\t"])
comments = st.sampled_from(["", "# a comment\n", "! another: one=2\n", "\n", "   \n"])


@given(
    settings=st.dictionaries(keys, values, max_size=12),
    layout=st.lists(st.tuples(separators, comments), min_size=12, max_size=12),
    line_end=st.sampled_from(["\n", "\r\n"]),
)
def test_any_settings_written_as_properties_parse_back(
    settings: dict[str, str], layout: list[tuple[str, str]], line_end: str
) -> None:
    text = "".join(
        f"{comment}{key}{separator}{value}{line_end}"
        for (key, value), (separator, comment) in zip(settings.items(), layout, strict=False)
    )
    assert parse_command_config(text) == settings


def test_reading_a_file(tmp_path: Path) -> None:
    assert read_command_config(None) == {}
    path = tmp_path / "client.properties"
    path.write_bytes("\ufeffclient.id=caf\u00e9\n".encode())  # a BOM, as some editors write
    assert read_command_config(path) == {"client.id": "caf\u00e9"}


def test_an_unreadable_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(CommandError) as caught:
        read_command_config(missing)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == (
        f"cannot read --command-config file {str(missing)!r}: No such file or directory"
    )
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"client.id=\xff\n")
    with pytest.raises(CommandError) as caught:
        read_command_config(binary)
    assert caught.value.message.startswith(f"cannot read --command-config file {str(binary)!r}")


def test_a_bad_line_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("client.id=x\noops\n")
    with pytest.raises(CommandError) as caught:
        read_command_config(path)
    assert (
        caught.value.message == f"--command-config {path}: line 2: expected key=value, got 'oops'"
    )


def settings_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_client_config_takes_the_files_settings_over_its_defaults(tmp_path: Path) -> None:
    path = settings_file(
        tmp_path,
        "client.id=billing\nsecurity.protocol=SSL\nsocket.connection.setup.timeout.ms=9000\n"
        "bootstrap.servers=elsewhere:9092\n",
    )
    conn = ConnectionSettings.create("10.0.0.1:9092", 2.5, path)
    assert conn.command_config_file == path
    config = conn.client_config()
    assert config["client.id"] == "billing"
    assert config["security.protocol"] == "SSL"
    assert config["socket.connection.setup.timeout.ms"] == "9000"
    assert config["bootstrap.servers"] == "10.0.0.1:9092"  # --bootstrap-server names it
    assert config["error_cb"] is conn.errors
    assert config["logger"] is conn.errors.logger


def test_without_a_file_the_defaults_stay() -> None:
    conn = ConnectionSettings.create("10.0.0.1:9092", 2.5)
    assert conn.command_config == {}
    assert conn.client_config()["client.id"] == "strom-cli"


def test_callbacks_stay_the_clis_own() -> None:
    conn = ConnectionSettings("h:1", 1.0, ErrorRecorder(), {"error_cb": "x", "logger": "y"})
    config = conn.client_config()
    assert (config["error_cb"], config["logger"]) == (conn.errors, conn.errors.logger)


@pytest.mark.parametrize("key", ["stats_cb", "logger", "default.topic.config"])
def test_a_setting_that_takes_a_python_object_is_refused(tmp_path: Path, key: str) -> None:
    path = settings_file(tmp_path, f"{key}=print\n")
    with pytest.raises(CommandError) as caught:
        ConnectionSettings.create("h:1", 1.0, path)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message.startswith(f"--command-config {path}: {key} takes a Python")


def test_a_key_librdkafka_does_not_know_is_a_usage_error(tmp_path: Path) -> None:
    path = settings_file(tmp_path, "client.id=x\nno.such.key=1\n")
    conn = ConnectionSettings.create("127.0.0.1:1", 1.0, path)
    with pytest.raises(CommandError) as caught:
        conn.create_client(Producer)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == (
        f"--command-config {path}: unknown key 'no.such.key' "
        "(librdkafka has no such configuration property)"
    )


def test_the_commands_own_settings_win_and_refusals_name_the_file(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def refusing(config: dict[str, Any]) -> None:
        seen.append(config)
        raise ValueError("expected throttle_cb property as a callable function")

    path = settings_file(tmp_path, "acks=1\nlinger.ms=50\n")
    conn = ConnectionSettings.create("h:1", 1.0, path)
    with pytest.raises(CommandError) as caught:
        conn.create_client(refusing, {"acks": "all"})
    assert (seen[0]["acks"], seen[0]["linger.ms"]) == ("all", "50")
    assert caught.value.message == (
        f"--command-config {path}: expected throttle_cb property as a callable function"
    )
    with pytest.raises(ValueError, match="throttle_cb"):  # no file: a bug, not a usage error
        ConnectionSettings.create("h:1", 1.0).create_client(refusing)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('No such configuration property: "sasl.mechanisms.x"', "unknown key 'sasl.mechanisms.x'"),
        (
            "Failed to create producer: sasl.username and sasl.password must be set",
            "sasl.username and sasl.password must be set",
        ),
        ('Invalid value "x" for configuration property "acks"', 'Invalid value "x" for'),
    ],
)
def test_refused_settings_reason(text: str, reason: str) -> None:
    assert refused_settings_reason(text).startswith(reason)


def test_strom_own_client_takes_librdkafkas_security_keys(tmp_path: Path) -> None:
    assert client_security({}, "F") is None
    assert client_security({"security.protocol": "plaintext", "client.id": "x"}, "F") is None
    sasl = client_security(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "alice",
            "sasl.password": "s3cret",
        },
        "F",
    )
    assert sasl is not None and sasl.tls is None and sasl.protocol == "SASL_PLAINTEXT"
    assert sasl.sasl is not None
    assert (sasl.sasl.mechanism, sasl.sasl.username) == ("SCRAM-SHA-512", "alice")
    assert "s3cret" not in repr(sasl)
    tls = client_security(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}, "F"
    )
    assert tls is not None and tls.tls is not None and tls.protocol == "SSL"
    assert not tls.tls.check_hostname
    unverified = client_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "enable.ssl.certificate.verification": "false",
        },
        "F",
    )
    assert unverified is not None and unverified.tls is not None
    assert unverified.tls.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"security.protocol": "TLS"}, "security.protocol=TLS is not one of"),
        ({"security.protocol": "SASL_SSL"}, "SASL mechanism 'GSSAPI'"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
            "sasl.mechanism=OAUTHBEARER needs a way to get tokens: set "
            "sasl.oauthbearer.method=oidc with sasl.oauthbearer.client.id, "
            "sasl.oauthbearer.client.secret and sasl.oauthbearer.token.endpoint.url, or, for "
            "development, enable.sasl.oauthbearer.unsecure.jwt=true with "
            "sasl.oauthbearer.config=principal=<name>",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": "scope=kafka",
            },
            "sasl.oauthbearer.config has no principal=<name>",
        ),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "orders",
                "sasl.oauthbearer.client.secret": "orders-secret",
                "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
                "https.ca.location": "/nonexistent/idp-ca.pem",
            },
            "cannot use https.ca.location",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            "cannot use its TLS settings",
        ),
    ],
)
def test_security_strom_own_client_cannot_use_is_a_usage_error(
    settings: dict[str, str], problem: str
) -> None:
    with pytest.raises(CommandError) as caught:
        client_security(settings, "F")
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message.startswith("F: ")
    assert problem in caught.value.message


def test_strom_own_client_takes_librdkafkas_oauthbearer_keys() -> None:
    settings = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "oauthbearer",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=alice",
    }
    security = client_security(settings, "F")
    assert security is not None and security.protocol == "SASL_PLAINTEXT"
    assert security.sasl is not None and security.sasl.mechanism == "OAUTHBEARER"
    assert security.sasl.tokens is not None
    oidc = client_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "orders",
            "sasl.oauthbearer.client.secret": "orders-secret",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        },
        "F",
    )
    assert oidc is not None and "orders-secret" not in repr(oidc)


def test_run_session_refuses_before_connecting(tmp_path: Path) -> None:
    path = settings_file(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")

    async def never(_: object) -> None:
        raise AssertionError("connected")

    with pytest.raises(CommandError) as caught:
        run_session("127.0.0.1:1", 1.0, never, path)
    assert "GSSAPI" in caught.value.message


def client_commands() -> list[tuple[str, Any]]:
    """Every `strom` command but serve and dev (and the web console, not a client command).
    Typer's commands are click's (typer ships its own copy): groups have `commands`."""
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, command: Any) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(f"{prefix} {name}".strip(), sub)
        elif prefix not in {"serve", "dev", "console"}:
            found.append((prefix, command))

    walk("", typer.main.get_command(app))
    return found


def test_every_client_command_takes_a_command_config() -> None:
    commands = client_commands()
    assert {"topic list", "cluster status", "txn abort", "config set", "produce"} <= {
        name for name, _ in commands
    }
    for name, command in commands:
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--command-config" in options, name


def test_the_cli_reports_a_missing_file_and_a_tls_setting(tmp_path: Path) -> None:
    result = runner.invoke(app, ["topic", "list", "--command-config", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert result.stderr.startswith("strom: cannot read --command-config file")
    tls = settings_file(tmp_path, "security.protocol=SSL\nssl.ca.location=/nonexistent\n")
    result = runner.invoke(app, ["cluster", "status"], env={"STROM_COMMAND_CONFIG": str(tls)})
    assert result.exit_code == 2
    assert "cannot use its TLS settings" in result.stderr
