"""`strom user list|add|remove` as a user runs it, against a real `strom serve` process
with a PLAINTEXT listener (where the CLI manages users) and a SASL_PLAINTEXT listener
offering SCRAM-SHA-256 and SCRAM-SHA-512: the users the CLI adds authenticate there with
confluent-kafka, a wrong password is refused, and a removed user is refused too. The
password prompt runs on a real pseudo-terminal."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import BrokerProcess, free_port
from cli_runner import strom
from client_helpers import CLIENT_TIMEOUT_S, unique_topic
from confluent_kafka import Consumer, KafkaError, Producer

MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512"


class ScramBroker:
    def __init__(self, process: BrokerProcess, sasl_port: int) -> None:
        self.process = process
        self.sasl_port = sasl_port
        self.b = ["-b", process.bootstrap]


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScramBroker]:
    sasl_port = free_port()
    settings = [
        f"sasl.enabled.mechanisms={MECHANISMS}",
        "connection.failed.authentication.delay.ms=50",
    ]
    process = BrokerProcess(
        tmp_path_factory.mktemp("scram-broker") / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{sasl_port}"],
        extra=[part for setting in settings for part in ("--set", setting)],
    )
    process.start()
    try:
        yield ScramBroker(process, sasl_port)
    finally:
        process.kill()


def rows(output: str) -> list[tuple[str, ...]]:
    """The rows of `strom user list`'s table, without its header."""
    lines = output.splitlines()
    assert lines and lines[0].split() == ["USER", "MECHANISM", "ITERATIONS"], output
    return [tuple(line.split()) for line in lines[1:]]


def listed(broker: ScramBroker, *users: str) -> list[tuple[str, ...]]:
    result = strom("user", "list", *users, *broker.b)
    assert result.returncode == 0, result.stderr
    return rows(result.stdout)


def add(broker: ScramBroker, user: str, password: str, *options: str) -> str:
    result = strom("user", "add", user, "--password-stdin", *options, *broker.b, stdin=password)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_add_list_replace_and_remove_a_user(scram_broker: ScramBroker, tmp_path: Path) -> None:
    b = scram_broker.b
    password_file = tmp_path / "alice.password"
    password_file.write_text("alice-256\n")
    added = strom(
        "user", "add", "alice", "-m", "SCRAM-SHA-256", "--password-file", str(password_file), *b
    )
    assert added.returncode == 0, added.stderr
    assert added.stdout == "added the SCRAM-SHA-256 credential of user 'alice' (4096 iterations)\n"
    assert listed(scram_broker, "alice") == [("alice", "SCRAM-SHA-256", "4096")]

    # The default mechanism is SCRAM-SHA-512; the password comes from stdin.
    assert add(scram_broker, "alice", "alice-512\n", "--iterations", "8192") == (
        "added the SCRAM-SHA-512 credential of user 'alice' (8192 iterations)\n"
    )
    both = [("alice", "SCRAM-SHA-256", "4096"), ("alice", "SCRAM-SHA-512", "8192")]
    assert listed(scram_broker, "alice") == both
    assert set(both) <= set(listed(scram_broker))

    # Adding a mechanism the user has replaces its password and iterations.
    assert add(scram_broker, "alice", "alice-512-again", "-i", "4096") == (
        "replaced the SCRAM-SHA-512 credential of user 'alice' (4096 iterations)\n"
    )
    assert listed(scram_broker, "alice")[1] == ("alice", "SCRAM-SHA-512", "4096")

    one = strom("user", "remove", "alice", "--mechanism", "SCRAM-SHA-256", *b)
    assert one.returncode == 0, one.stderr
    assert one.stdout == "removed the SCRAM-SHA-256 credential of user 'alice'\n"
    assert listed(scram_broker, "alice") == [("alice", "SCRAM-SHA-512", "4096")]
    again = strom("user", "remove", "alice", "--mechanism", "SCRAM-SHA-256", *b)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == "strom: user 'alice' has no SCRAM-SHA-256 credential\n"

    rest = strom("user", "remove", "alice", *b)
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout == "removed the SCRAM-SHA-512 credential of user 'alice'\n"
    gone = strom("user", "list", "alice", *b)
    assert (gone.returncode, gone.stdout) == (1, "")
    assert gone.stderr == "strom: user 'alice' has no SCRAM credentials\n"
    assert not any(row[0] == "alice" for row in listed_or_none(scram_broker))
    removed_again = strom("user", "remove", "alice", *b)
    assert removed_again.returncode == 1
    assert removed_again.stderr == "strom: user 'alice' has no SCRAM credentials\n"


def listed_or_none(broker: ScramBroker) -> list[tuple[str, ...]]:
    """Every user's rows; none when the cluster has no SCRAM user at all."""
    result = strom("user", "list", *broker.b)
    assert result.returncode == 0, result.stderr
    if result.stderr == "no SCRAM users\n":
        return []
    return rows(result.stdout)


def test_removing_every_mechanism_of_a_user_with_two(scram_broker: ScramBroker) -> None:
    add(scram_broker, "frank", "frank-pw", "-m", "SCRAM-SHA-256")
    add(scram_broker, "frank", "frank-pw", "-m", "SCRAM-SHA-512")
    removed = strom("user", "remove", "frank", *scram_broker.b)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.splitlines() == [
        "removed the SCRAM-SHA-256 credential of user 'frank'",
        "removed the SCRAM-SHA-512 credential of user 'frank'",
    ]
    assert strom("user", "list", "frank", *scram_broker.b).returncode == 1


def test_a_missing_user_is_an_error_line_beside_the_others(scram_broker: ScramBroker) -> None:
    add(scram_broker, "bob", "bob-pw")
    result = strom("user", "list", "bob", "nobody", *scram_broker.b)
    assert result.returncode == 1
    assert rows(result.stdout) == [("bob", "SCRAM-SHA-512", "4096")]
    assert result.stderr == "strom: user 'nobody' has no SCRAM credentials\n"


def test_any_name_is_listed_as_it_is(scram_broker: ScramBroker) -> None:
    names = ["[ops]", ":fire:", "zoë", "a,b=c"]
    for name in names:
        add(scram_broker, name, "pw", "-m", "SCRAM-SHA-256")
    assert listed(scram_broker, *names) == sorted((n, "SCRAM-SHA-256", "4096") for n in names)
    conf = sasl_conf(scram_broker, "a,b=c", "pw", "SCRAM-SHA-256")  # escaped as a=2Cb=3Dc
    assert round_trip(conf, 1) == [b"v0"]


@pytest.mark.parametrize(
    ("iterations", "message"), [("100", "Too few iterations"), ("20000", "Too many iterations")]
)
def test_iterations_out_of_bounds_get_the_brokers_message(
    scram_broker: ScramBroker, iterations: str, message: str
) -> None:
    result = strom(
        "user", "add", "carol", "-i", iterations, "--password-stdin", *scram_broker.b, stdin="pw"
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"strom: user 'carol' (SCRAM-SHA-512, {iterations} iterations): "
        f"UNACCEPTABLE_CREDENTIAL: {message}\n"
    )
    assert strom("user", "list", "carol", *scram_broker.b).returncode == 1


def test_an_unreachable_broker_exits_3() -> None:
    port = free_port()
    for args in (["list"], ["add", "x", "--password-stdin"], ["remove", "x"]):
        result = strom("user", *args, "-b", f"127.0.0.1:{port}", "--timeout", "1", stdin="pw")
        assert result.returncode == 3, result.stderr
        assert result.stderr == (
            f"strom: cannot reach a broker at 127.0.0.1:{port} (connection refused)\n"
        )


# --- the users authenticate --------------------------------------------------------------


def sasl_conf(broker: ScramBroker, user: str, password: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{broker.sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def round_trip(conf: dict[str, Any], count: int) -> list[bytes]:
    """Produce `count` records to a new topic and read them back, over SASL."""
    topic = unique_topic("scram")
    errors: list[KafkaError] = []
    producer = Producer({**conf, "acks": "all", "error_cb": errors.append})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, errors
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(count, 0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                values.append(value)
    finally:
        consumer.close()
    return values


def authentication_failure(conf: dict[str, Any]) -> KafkaError:
    """The error a producer's error callback reports (it connects at once)."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error within the timeout"
    return errors[0]


def assert_refused(conf: dict[str, Any], mechanism: str) -> None:
    error = authentication_failure(conf)
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    ) in error.str()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_user_added_with_the_cli_authenticates(scram_broker: ScramBroker, mechanism: str) -> None:
    user = f"dave-{mechanism[-3:]}"
    add(scram_broker, user, "dave's secret\n", "--mechanism", mechanism)
    conf = sasl_conf(scram_broker, user, "dave's secret", mechanism)
    assert round_trip(conf, 20) == [f"v{i}".encode() for i in range(20)]
    assert_refused(sasl_conf(scram_broker, user, "guess", mechanism), mechanism)
    other = "SCRAM-SHA-512" if mechanism == "SCRAM-SHA-256" else "SCRAM-SHA-256"
    assert_refused(sasl_conf(scram_broker, user, "dave's secret", other), other)

    removed = strom("user", "remove", user, *scram_broker.b)
    assert removed.returncode == 0, removed.stderr
    assert_refused(conf, mechanism)
    log = scram_broker.process.read_log()
    assert "guess" not in log and "dave's secret" not in log


def test_the_cli_itself_authenticates_with_scram(scram_broker: ScramBroker, tmp_path: Path) -> None:
    add(scram_broker, "erin", "erin-pw", "-m", "SCRAM-SHA-256")
    client = tmp_path / "client.properties"
    sasl = ["-b", f"localhost:{scram_broker.sasl_port}", "--command-config", str(client)]
    settings = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
    client.write_text(settings + "sasl.username=erin\nsasl.password=erin-pw\n")
    result = strom("user", "list", "erin", *sasl)
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout) == [("erin", "SCRAM-SHA-256", "4096")]
    client.write_text(settings + "sasl.username=erin\nsasl.password=wrong\n")
    refused = strom("user", "list", "erin", *sasl, "--timeout", "3")
    assert refused.returncode == 3
    assert refused.stderr == (
        f"strom: cannot reach a broker at localhost:{scram_broker.sasl_port} "
        "(authentication failed)\n"
    )


# --- the hidden prompt, on a pseudo-terminal ---------------------------------------------

# Run in a fresh process: forking this one, whose librdkafka threads may be running, is not
# safe. The child is a session leader whose controlling terminal is the pty, as in a shell.
PTY_DRIVER = r"""
import os, pty, select, sys, time
password = sys.stdin.readline().rstrip("\n").encode()
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "strom", *sys.argv[1:]])
seen = b""
deadline = time.monotonic() + 60
def read_until(marker):
    global seen
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        try:
            chunk = os.read(fd, 4096) if ready else b""
        except OSError:
            chunk = b""
        if not chunk:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.exit(f"no {marker!r} from strom")
        seen += chunk
read_until(b"Password for user 'grace': ")
os.write(fd, password + b"\n")
read_until(b"Repeat for confirmation: ")
os.write(fd, password + b"\n")
read_until(b"(4096 iterations)")
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_the_password_is_typed_twice_at_a_hidden_prompt(scram_broker: ScramBroker) -> None:
    typed = "grace's typed secret"
    result = subprocess.run(
        [sys.executable, "-c", PTY_DRIVER, "user", "add", "grace", *scram_broker.b],
        input=typed + "\n",
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert typed not in result.stdout  # never echoed
    assert re.search(r"added the SCRAM-SHA-512 credential of user 'grace'", result.stdout)
    conf = sasl_conf(scram_broker, "grace", typed, "SCRAM-SHA-512")
    assert round_trip(conf, 1) == [b"v0"]
