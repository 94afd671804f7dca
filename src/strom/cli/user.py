"""`strom user list|add|remove`: a cluster's SCRAM users, strom's counterpart of
`kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-512=[password=...]'`.

Through confluent-kafka's admin client (DescribeUserScramCredentials,
AlterUserScramCredentials), so it works against any Kafka-compatible broker. The password
is never a command-line argument, which `ps` and the shell's history would show: it comes
from a file, from stdin, or from a hidden prompt typed twice. librdkafka salts it (a random
salt) and hashes it with the given iterations; the broker gets the salted password only.
Kafka refuses a request that names one user twice, so removing several of a user's
mechanisms takes one request each. What needs no broker is the pure helpers at the top.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    ConnectionSettings,
    ExitCode,
    TimeoutOption,
    admin_client,
    admin_outcome,
    echo_status,
    kafka_error_message,
    print_table,
    raise_failures,
    reporting_errors,
    usage_error,
)

if TYPE_CHECKING:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

user_app = typer.Typer(
    name="user",
    help="List, add and remove SCRAM users (SCRAM-SHA-256 and SCRAM-SHA-512 credentials).",
    no_args_is_help=True,
)

DEFAULT_ITERATIONS = 4096
"""Kafka's minimum, and what kafka-configs.sh uses when none is given."""
LIST_HEADERS = ("USER", "MECHANISM", "ITERATIONS")


class ScramMechanismName(StrEnum):
    """A SCRAM mechanism as Kafka spells it, with its type number in the admin API."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def kafka_type(self) -> int:
        return 1 if self is ScramMechanismName.SCRAM_SHA_256 else 2


DEFAULT_MECHANISM = ScramMechanismName.SCRAM_SHA_512
"""Kafka's tools have no default; SHA-512 is the stronger hash, served wherever SCRAM is."""


def mechanism_label(kafka_type: int) -> str:
    """1 -> "SCRAM-SHA-256"; a type this client does not know is shown by its number."""
    for mechanism in ScramMechanismName:
        if mechanism.kafka_type == kafka_type:
            return mechanism.value
    return f"unknown mechanism {kafka_type}"


@dataclass(frozen=True, slots=True)
class ScramUserCredentials:
    """One user's SCRAM credentials as the broker describes them (never their keys)."""

    user: str
    credentials: tuple[tuple[int, int], ...]
    """(mechanism type, iterations) of each credential, by mechanism type."""

    @property
    def mechanisms(self) -> list[int]:
        return [mechanism for mechanism, _ in self.credentials]


def credentials_from(user: str, description: Any) -> ScramUserCredentials:
    """confluent-kafka's UserScramCredentialsDescription as plain data."""
    credentials = sorted(
        (int(getattr(info.mechanism, "value", info.mechanism)), int(info.iterations))
        for info in description.scram_credential_infos
    )
    return ScramUserCredentials(user, tuple(credentials))


def user_rows(users: Iterable[ScramUserCredentials]) -> list[tuple[str, str, str]]:
    """(user, mechanism, iterations) per credential, by user then mechanism."""
    return [
        (user.user, mechanism_label(mechanism), str(iterations))
        for user in sorted(users, key=lambda u: u.user)
        for mechanism, iterations in user.credentials
    ]


def check_user(name: str) -> str:
    if not name.strip():
        raise usage_error("a user name must not be empty")
    return name


def unique_users(names: Sequence[str]) -> list[str]:
    """The users named, each once, in order (a broker refuses a user named twice)."""
    return list(dict.fromkeys(check_user(name) for name in names))


def missing_user_message(user: str) -> str:
    return f"user {user!r} has no SCRAM credentials"


def missing_credential_message(user: str, mechanism: str) -> str:
    return f"user {user!r} has no {mechanism} credential"


def user_error(
    connection: ConnectionSettings,
    error: KafkaError,
    user: str,
    mechanism: str | None = None,
    context: str | None = None,
) -> CommandError:
    """The error a user should see: a user (or one of its credentials) that does not
    exist is said so; an unreachable broker is exit code 3; any other is the broker's
    error name and message after `context` (the user, by default)."""
    if error.name() == "RESOURCE_NOT_FOUND":
        if mechanism is None:
            return CommandError(missing_user_message(user))
        return CommandError(missing_credential_message(user, mechanism))
    command_error = connection.kafka_error(error)
    if command_error.exit_code is not ExitCode.KAFKA_ERROR:
        return command_error
    return CommandError(kafka_error_message(error.name(), error.str(), context or f"user {user!r}"))


class PasswordSource(Enum):
    FILE = "file"
    STDIN = "stdin"
    PROMPT = "prompt"


def password_source(
    password_file: Path | None, password_stdin: bool, stdin_is_tty: bool
) -> PasswordSource:
    """Where `add` reads the password: --password-file, --password-stdin, or a prompt,
    which needs a terminal."""
    if password_file is not None and password_stdin:
        raise usage_error("choose one of --password-file FILE and --password-stdin")
    if password_file is not None:
        return PasswordSource.FILE
    if password_stdin:
        return PasswordSource.STDIN
    if not stdin_is_tty:
        raise usage_error(
            "no password: give --password-file FILE or --password-stdin "
            "(strom prompts for one only on a terminal)"
        )
    return PasswordSource.PROMPT


def password_from_text(text: str, origin: str) -> str:
    """The password in a file's or stdin's text: one trailing line break (\\n or \\r\\n,
    as `echo` and editors add) is dropped, nothing else; an empty password is refused."""
    password = text.removesuffix("\r\n") if text.endswith("\r\n") else text.removesuffix("\n")
    if not password:
        raise usage_error(f"the password from {origin} is empty")
    return password


def password_from_bytes(data: bytes, origin: str) -> str:
    """UTF-8 (a byte order mark dropped): the bytes SCRAM hashes are the password's UTF-8."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise usage_error(f"the password from {origin} is not UTF-8 text") from None
    return password_from_text(text, origin)


def add_line(user: str, mechanism: str, iterations: int, replaced: bool) -> str:
    verb = "replaced" if replaced else "added"
    return f"{verb} the {mechanism} credential of user {user!r} ({iterations} iterations)"


def remove_line(user: str, mechanism: str) -> str:
    return f"removed the {mechanism} credential of user {user!r}"


# --- reading the password ----------------------------------------------------------------


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def read_password(source: PasswordSource, password_file: Path | None, user: str) -> str:
    if source is PasswordSource.FILE:
        assert password_file is not None
        try:
            data = password_file.read_bytes()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise usage_error(
                f"cannot read --password-file {str(password_file)!r}: {reason}"
            ) from None
        return password_from_bytes(data, f"--password-file {str(password_file)!r}")
    if source is PasswordSource.STDIN:
        buffer = getattr(sys.stdin, "buffer", None)
        data = buffer.read() if buffer is not None else sys.stdin.read().encode()
        return password_from_bytes(data, "stdin")
    password: str = typer.prompt(
        f"Password for user {user!r}", hide_input=True, confirmation_prompt=True, err=True
    )
    return password


# --- talking to the broker ---------------------------------------------------------------


def _connect(
    bootstrap: str, timeout: float, command_config: Path | None
) -> tuple[ConnectionSettings, AdminClient]:
    """An admin client, after the metadata says a broker answers (so an unreachable one
    is reported with its reason, exit code 3)."""
    connection = ConnectionSettings.create(bootstrap, timeout, command_config)
    admin = admin_client(connection)
    connection.metadata(admin)
    return connection, admin


def describe_all(admin: AdminClient, connection: ConnectionSettings) -> list[ScramUserCredentials]:
    future = admin.describe_user_scram_credentials(request_timeout=connection.timeout_s)
    assert not isinstance(future, dict)  # no users named: one future for all
    found, error = admin_outcome(future, connection, "SCRAM users")
    if error is not None:
        raise connection.kafka_error(error, "SCRAM users")
    return [credentials_from(user, description) for user, description in found.items()]


def _describe_outcomes(
    admin: AdminClient, connection: ConnectionSettings, users: Sequence[str]
) -> list[tuple[str, ScramUserCredentials | None, KafkaError | None]]:
    futures = admin.describe_user_scram_credentials(
        list(users), request_timeout=connection.timeout_s
    )
    assert isinstance(futures, dict)  # users named: a future per user
    outcomes: list[tuple[str, ScramUserCredentials | None, KafkaError | None]] = []
    for user in users:
        description, error = admin_outcome(futures[user], connection, f"user {user!r}")
        found = None if error is not None else credentials_from(user, description)
        outcomes.append((user, found, error))
    return outcomes


def describe_users(
    admin: AdminClient, connection: ConnectionSettings, users: Sequence[str]
) -> tuple[list[ScramUserCredentials], list[CommandError]]:
    """The users' credentials, and an error for each user that failed (one without
    credentials among them)."""
    found: list[ScramUserCredentials] = []
    failures: list[CommandError] = []
    for user, credentials, error in _describe_outcomes(admin, connection, users):
        if credentials is not None:
            found.append(credentials)
        elif error is not None:
            failures.append(user_error(connection, error, user))
    return found, failures


def describe_user(
    admin: AdminClient, connection: ConnectionSettings, user: str
) -> ScramUserCredentials | None:
    """One user's credentials; None for a user without any."""
    [(_, found, error)] = _describe_outcomes(admin, connection, [user])
    if error is not None:
        if error.name() == "RESOURCE_NOT_FOUND":
            return None
        raise user_error(connection, error, user)
    return found


def _admin_mechanism(mechanism: ScramMechanismName) -> Any:
    from confluent_kafka.admin import ScramMechanism  # type: ignore[attr-defined]

    return ScramMechanism[mechanism.name]


def alter(
    admin: AdminClient,
    connection: ConnectionSettings,
    alteration: Any,
    user: str,
    mechanism: str | None,
    context: str,
) -> None:
    futures = admin.alter_user_scram_credentials([alteration], request_timeout=connection.timeout_s)
    _, error = admin_outcome(futures[user], connection, context)
    if error is not None:
        raise user_error(connection, error, user, mechanism, context)


def upsert(
    admin: AdminClient,
    connection: ConnectionSettings,
    user: str,
    mechanism: ScramMechanismName,
    iterations: int,
    password: str,
) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ScramCredentialInfo,
        UserScramCredentialUpsertion,
    )

    info = ScramCredentialInfo(_admin_mechanism(mechanism), iterations)
    upsertion = UserScramCredentialUpsertion(user, info, password.encode("utf-8"))
    context = f"user {user!r} ({mechanism.value}, {iterations} iterations)"
    alter(admin, connection, upsertion, user, None, context)


def delete(
    admin: AdminClient, connection: ConnectionSettings, user: str, mechanism: ScramMechanismName
) -> None:
    from confluent_kafka.admin import UserScramCredentialDeletion  # type: ignore[attr-defined]

    deletion = UserScramCredentialDeletion(user, _admin_mechanism(mechanism))
    context = f"user {user!r} ({mechanism.value})"
    alter(admin, connection, deletion, user, mechanism.value, context)


def mechanisms_to_remove(
    described: ScramUserCredentials | None, user: str
) -> list[ScramMechanismName]:
    """Every mechanism the user has that this client can name; none is an error."""
    if described is None or not described.credentials:
        raise CommandError(missing_user_message(user))
    known = {m.kafka_type: m for m in ScramMechanismName}
    unknown = [m for m in described.mechanisms if m not in known]
    if unknown:
        raise CommandError(
            f"user {user!r} has a credential of {mechanism_label(unknown[0])}, which strom "
            "cannot name: remove the others with --mechanism"
        )
    return [known[m] for m in described.mechanisms]


# --- the commands ------------------------------------------------------------------------

UserArgument = Annotated[str, typer.Argument(metavar="USER", help="User name.", show_default=False)]


@user_app.command("list")
def list_users(
    users: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="USER", help="Only these users (all without one).", show_default=False
        ),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show SCRAM users with their mechanisms and iteration counts.

    Every user when none is named; a named user without credentials is an error."""
    with reporting_errors():
        wanted = unique_users(users or [])
        connection, admin = _connect(bootstrap, timeout, command_config)
        failures: list[CommandError] = []
        if wanted:
            found, failures = describe_users(admin, connection, wanted)
        else:
            found = describe_all(admin, connection)
            if not found:
                echo_status("no SCRAM users")
                return
        rows = user_rows(found)
        if rows:
            print_table(LIST_HEADERS, rows)
        raise_failures(failures)


MechanismChoice = Annotated[
    ScramMechanismName,
    typer.Option(
        "--mechanism",
        "-m",
        metavar="SCRAM-SHA-256|SCRAM-SHA-512",
        help="The SCRAM mechanism; a SASL listener must enable it in sasl.enabled.mechanisms.",
    ),
]


@user_app.command("add")
def add(
    user: UserArgument,
    mechanism: MechanismChoice = DEFAULT_MECHANISM,
    iterations: Annotated[
        int,
        typer.Option(
            "--iterations",
            "-i",
            min=1,
            help="Hash iterations (Kafka brokers take 4096 to 16384).",
        ),
    ] = DEFAULT_ITERATIONS,
    password_file: Annotated[
        Path | None,
        typer.Option(
            "--password-file",
            metavar="FILE",
            help="Read the password from FILE (one trailing line break is dropped).",
            show_default=False,
        ),
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read the password from stdin (one trailing line break is dropped).",
        ),
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Add a SCRAM user, or replace its password for one mechanism.

    An existing user's other mechanism keeps its own password. Without --password-file
    or --password-stdin the password is typed twice at a hidden prompt. No option takes
    the password itself: a command line shows in `ps` and in the shell's history."""
    with reporting_errors():
        check_user(user)
        source = password_source(password_file, password_stdin, stdin_is_tty())
        password = read_password(source, password_file, user)
        connection, admin = _connect(bootstrap, timeout, command_config)
        before = describe_user(admin, connection, user)
        replaced = before is not None and mechanism.kafka_type in before.mechanisms
        upsert(admin, connection, user, mechanism, iterations, password)
        print(add_line(user, mechanism.value, iterations, replaced), flush=True)


@user_app.command("remove")
def remove(
    user: UserArgument,
    mechanisms: Annotated[
        list[ScramMechanismName] | None,
        typer.Option(
            "--mechanism",
            "-m",
            metavar="SCRAM-SHA-256|SCRAM-SHA-512",
            help="Remove only this mechanism's credential (repeatable); without it, all of them.",
            show_default=False,
        ),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Remove a SCRAM user's credentials.

    Every mechanism the user has, or only those given with --mechanism. A user without
    credentials can no longer authenticate with SCRAM."""
    with reporting_errors():
        check_user(user)
        connection, admin = _connect(bootstrap, timeout, command_config)
        chosen = list(dict.fromkeys(mechanisms or []))
        if not chosen:
            chosen = mechanisms_to_remove(describe_user(admin, connection, user), user)
        failures: list[CommandError] = []
        for mechanism in chosen:
            try:
                delete(admin, connection, user, mechanism)
            except CommandError as failure:
                if failure.exit_code is not ExitCode.KAFKA_ERROR:
                    raise
                failures.append(failure)
            else:
                print(remove_line(user, mechanism.value), flush=True)
        raise_failures(failures)
