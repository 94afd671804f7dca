"""`strom user list|add|remove`: mechanisms, tables, password sources, error lines and the
usage errors raised before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialsDescription,
)
from typer.testing import CliRunner

import strom.cli.user as user_cli
from strom.cli.common import CommandError, ConnectionSettings, ExitCode, print_table
from strom.cli.main import app
from strom.cli.user import (
    DEFAULT_ITERATIONS,
    DEFAULT_MECHANISM,
    PasswordSource,
    ScramMechanismName,
    ScramUserCredentials,
    add_line,
    check_user,
    credentials_from,
    mechanism_label,
    mechanisms_to_remove,
    missing_credential_message,
    missing_user_message,
    password_from_bytes,
    password_from_text,
    password_source,
    read_password,
    remove_line,
    unique_users,
    user_error,
    user_rows,
)

runner = CliRunner()
RESOURCE_NOT_FOUND = 91
UNACCEPTABLE_CREDENTIAL = 93


def connection() -> ConnectionSettings:
    return ConnectionSettings.create("127.0.0.1:9092", 5.0)


def test_mechanisms_are_kafkas_types_and_confluent_kafkas_names() -> None:
    assert [m.value for m in ScramMechanismName] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for mechanism in ScramMechanismName:
        assert ScramMechanism[mechanism.name].value == mechanism.kafka_type
    assert [mechanism_label(t) for t in (1, 2, 7)] == [
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
        "unknown mechanism 7",
    ]
    assert DEFAULT_MECHANISM is ScramMechanismName.SCRAM_SHA_512
    assert DEFAULT_ITERATIONS == 4096


def test_a_description_becomes_plain_data_sorted_by_mechanism() -> None:
    description = UserScramCredentialsDescription(
        "alice",
        [
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        ],
    )
    found = credentials_from("alice", description)
    assert found == ScramUserCredentials("alice", ((1, 4096), (2, 8192)))
    assert found.mechanisms == [1, 2]


def test_rows_are_by_user_then_mechanism() -> None:
    users = [
        ScramUserCredentials("bob", ((2, 4096),)),
        ScramUserCredentials("alice", ((1, 4096), (2, 16384))),
        ScramUserCredentials("carol", ()),
    ]
    assert user_rows(users) == [
        ("alice", "SCRAM-SHA-256", "4096"),
        ("alice", "SCRAM-SHA-512", "16384"),
        ("bob", "SCRAM-SHA-512", "4096"),
    ]
    assert user_rows([]) == []


def test_cells_are_shown_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    names = ["[ops]", "[/x]", ":fire:", "a,b=c"]
    users = [ScramUserCredentials(name, ((1, 4096),)) for name in names]
    print_table(("USER", "MECHANISM", "ITERATIONS"), user_rows(users))
    shown = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert shown == sorted(names)


def test_user_names_must_not_be_empty_and_are_asked_for_once() -> None:
    assert check_user("alice") == "alice"
    assert unique_users(["bob", "alice", "bob"]) == ["bob", "alice"]
    for name in ("", "  "):
        with pytest.raises(CommandError) as info:
            check_user(name)
        assert info.value.exit_code is ExitCode.USAGE
        assert info.value.message == "a user name must not be empty"


@pytest.mark.parametrize(
    ("password_file", "password_stdin", "tty", "expected"),
    [
        (Path("pw"), False, False, PasswordSource.FILE),
        (Path("pw"), False, True, PasswordSource.FILE),
        (None, True, False, PasswordSource.STDIN),
        (None, True, True, PasswordSource.STDIN),
        (None, False, True, PasswordSource.PROMPT),
    ],
)
def test_password_source(
    password_file: Path | None, password_stdin: bool, tty: bool, expected: PasswordSource
) -> None:
    assert password_source(password_file, password_stdin, tty) is expected


@pytest.mark.parametrize(
    ("password_file", "password_stdin", "message"),
    [
        (Path("pw"), True, "choose one of --password-file FILE and --password-stdin"),
        (
            None,
            False,
            "no password: give --password-file FILE or --password-stdin "
            "(strom prompts for one only on a terminal)",
        ),
    ],
)
def test_password_source_refusals(
    password_file: Path | None, password_stdin: bool, message: str
) -> None:
    with pytest.raises(CommandError) as info:
        password_source(password_file, password_stdin, stdin_is_tty=False)
    assert (info.value.exit_code, info.value.message) == (ExitCode.USAGE, message)


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("secret", "secret"),
        ("secret\n", "secret"),
        ("secret\r\n", "secret"),
        ("secret\n\n", "secret\n"),  # only one line break is dropped
        ("secret\r", "secret\r"),
        (" spaced secret \n", " spaced secret "),
        ("pässwörd\n", "pässwörd"),
    ],
)
def test_password_from_text_drops_one_trailing_line_break(text: str, password: str) -> None:
    assert password_from_text(text, "stdin") == password


@pytest.mark.parametrize("text", ["", "\n", "\r\n"])
def test_an_empty_password_is_refused(text: str) -> None:
    with pytest.raises(CommandError) as info:
        password_from_text(text, "stdin")
    assert info.value.exit_code is ExitCode.USAGE
    assert info.value.message == "the password from stdin is empty"


def test_password_bytes_are_utf8_with_an_optional_byte_order_mark() -> None:
    assert password_from_bytes("pässwörd\n".encode(), "stdin") == "pässwörd"
    assert password_from_bytes(b"\xef\xbb\xbfsecret\n", "stdin") == "secret"
    with pytest.raises(CommandError) as info:
        password_from_bytes(b"\xff\xfe", "--password-file 'pw'")
    assert info.value.message == "the password from --password-file 'pw' is not UTF-8 text"


def test_read_password_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_bytes(b"from-a-file\n")
    assert read_password(PasswordSource.FILE, path, "alice") == "from-a-file"
    with pytest.raises(CommandError) as info:
        read_password(PasswordSource.FILE, tmp_path / "missing", "alice")
    assert info.value.exit_code is ExitCode.USAGE
    assert info.value.message == (
        f"cannot read --password-file {str(tmp_path / 'missing')!r}: No such file or directory"
    )


def test_read_password_from_stdin_and_from_the_prompt() -> None:
    with runner.isolation(input=b"from-stdin\n"):
        assert read_password(PasswordSource.STDIN, None, "alice") == "from-stdin"
    # Typed twice; a mismatch or an empty answer asks again.
    with runner.isolation(input="first\nsecond\n\ntyped\ntyped\n") as (_, stderr, _):
        assert read_password(PasswordSource.PROMPT, None, "alice") == "typed"
        prompts = stderr.getvalue().decode()
    assert "Password for user 'alice':" in prompts
    assert "Repeat for confirmation:" in prompts
    assert "Error: The two entered values do not match." in prompts
    assert "typed" not in prompts and "first" not in prompts  # hidden


def test_a_missing_user_or_credential_is_said_so() -> None:
    missing = KafkaError(RESOURCE_NOT_FOUND, "Attempt to describe a user credential ...")
    assert user_error(connection(), missing, "bob").message == missing_user_message("bob")
    assert missing_user_message("bob") == "user 'bob' has no SCRAM credentials"
    assert user_error(connection(), missing, "bob", "SCRAM-SHA-256").message == (
        "user 'bob' has no SCRAM-SHA-256 credential"
    )
    assert missing_credential_message("bob", "SCRAM-SHA-256") == (
        "user 'bob' has no SCRAM-SHA-256 credential"
    )


def test_the_brokers_refusal_is_shown_with_its_context() -> None:
    too_few = KafkaError(UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    context = "user 'bob' (SCRAM-SHA-512, 100 iterations)"
    error = user_error(connection(), too_few, "bob", None, context)
    assert error.exit_code is ExitCode.KAFKA_ERROR
    assert error.message == (
        "user 'bob' (SCRAM-SHA-512, 100 iterations): UNACCEPTABLE_CREDENTIAL: Too few iterations"
    )
    assert user_error(connection(), too_few, "bob").message.startswith("user 'bob': ")


def test_an_unreachable_broker_is_exit_code_3() -> None:
    settings = connection()
    settings.errors(KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/bootstrap: Connect failed"))
    error = user_error(settings, KafkaError(KafkaError._TRANSPORT), "bob")
    assert error.exit_code is ExitCode.UNREACHABLE
    assert error.message.startswith("cannot reach a broker at 127.0.0.1:9092")


def test_remove_takes_every_mechanism_the_user_has() -> None:
    both = ScramUserCredentials("alice", ((1, 4096), (2, 4096)))
    assert mechanisms_to_remove(both, "alice") == list(ScramMechanismName)
    for nothing in (None, ScramUserCredentials("alice", ())):
        with pytest.raises(CommandError) as info:
            mechanisms_to_remove(nothing, "alice")
        assert info.value.message == "user 'alice' has no SCRAM credentials"
    with pytest.raises(CommandError) as info:
        mechanisms_to_remove(ScramUserCredentials("alice", ((1, 4096), (3, 4096))), "alice")
    assert "unknown mechanism 3" in info.value.message


def test_result_lines() -> None:
    assert add_line("alice", "SCRAM-SHA-512", 4096, replaced=False) == (
        "added the SCRAM-SHA-512 credential of user 'alice' (4096 iterations)"
    )
    assert add_line("alice", "SCRAM-SHA-256", 8192, replaced=True) == (
        "replaced the SCRAM-SHA-256 credential of user 'alice' (8192 iterations)"
    )
    assert remove_line("alice", "SCRAM-SHA-256") == (
        "removed the SCRAM-SHA-256 credential of user 'alice'"
    )


# --- the commands, stopped before they connect --------------------------------------------


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replaces the connection with a failure: the commands' arguments are checked and
    the password read first. Returns the users connected for."""
    connected: list[str] = []

    def refuse(bootstrap: str, timeout: float, command_config: Path | None) -> None:
        connected.append(bootstrap)
        raise CommandError("stopped before connecting", ExitCode.UNREACHABLE)

    monkeypatch.setattr(user_cli, "_connect", refuse)
    return connected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["user", "add", ""], "a user name must not be empty"),
        (["user", "remove", " "], "a user name must not be empty"),
        (["user", "list", "alice", ""], "a user name must not be empty"),
        (
            ["user", "add", "alice", "--password-file", "pw", "--password-stdin"],
            "choose one of --password-file FILE and --password-stdin",
        ),
        (
            ["user", "add", "alice"],
            "no password: give --password-file FILE or --password-stdin "
            "(strom prompts for one only on a terminal)",
        ),
        (
            ["user", "add", "alice", "--password-file", "/nonexistent/pw"],
            "cannot read --password-file '/nonexistent/pw': No such file or directory",
        ),
    ],
)
def test_usage_errors_exit_2_before_connecting(
    no_broker: list[str], args: list[str], message: str
) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == f"strom: {message}\n"
    assert no_broker == []


def test_an_empty_password_on_stdin_is_refused(no_broker: list[str]) -> None:
    result = runner.invoke(app, ["user", "add", "alice", "--password-stdin"], input="\n")
    assert result.exit_code == 2
    assert result.stderr == "strom: the password from stdin is empty\n"
    assert no_broker == []


@pytest.mark.parametrize(
    "args",
    [
        ["user", "add", "alice", "--mechanism", "PLAIN", "--password-stdin"],
        ["user", "add", "alice", "--mechanism", "scram-sha-256", "--password-stdin"],
        ["user", "add", "alice", "--iterations", "0", "--password-stdin"],
        ["user", "remove", "alice", "--mechanism", "GSSAPI"],
        ["user", "add"],
        ["user", "remove"],
    ],
)
def test_bad_options_exit_2(no_broker: list[str], args: list[str]) -> None:
    result = runner.invoke(app, args, input="pw\n")
    assert result.exit_code == 2
    assert no_broker == []


def test_an_unsupported_mechanism_names_the_choices(no_broker: list[str]) -> None:
    result = runner.invoke(app, ["user", "add", "alice", "-m", "PLAIN", "--password-stdin"])
    assert "'PLAIN' is not one of 'SCRAM-SHA-256', 'SCRAM-SHA-512'" in " ".join(
        result.stderr.replace("│", " ").split()
    )


def test_the_prompt_is_used_on_a_terminal(
    no_broker: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(user_cli, "stdin_is_tty", lambda: True)
    result = runner.invoke(app, ["user", "add", "alice", "-b", "h:1"], input="pw\npw\n")
    assert result.exit_code == 3
    assert "Password for user 'alice':" in result.stderr
    assert result.stderr.endswith("strom: stopped before connecting\n")
    assert no_broker == ["h:1"]


def test_help_says_the_password_is_never_an_argument() -> None:
    result = runner.invoke(app, ["user", "add", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert "--password-file" in text and "--password-stdin" in text
    assert "No option takes the password itself" in text and "`ps`" in text
    listed = runner.invoke(app, ["user", "--help"], terminal_width=200)
    for command in ("list", "add", "remove"):
        assert command in listed.output
