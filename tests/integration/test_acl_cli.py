"""`strom acl list|add|remove` as a user runs it: against a real `strom serve` process with
an authorizer and a SASL_PLAINTEXT listener (PLAIN), as the super user `admin` through
--command-config; as `alice`, who may not touch ACLs until an ACL the CLI adds lets her;
and against a broker without an authorizer, which the CLI says so of."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess, free_port
from cli_runner import strom
from client_helpers import unique_topic

from strom.cli.common import ConnectionSettings
from strom.console.groups import acl_listing
from strom.testing.cluster import StromCluster

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    + ";"
)
HEADERS = ["RESOURCE TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
NO_AUTHORIZER = (
    "strom: the broker has no authorizer: set authorizer.class.name (docs/security.md)\n"
)


class AclCliBroker:
    """The broker, and the CLI's connection options as each user."""

    def __init__(self, process: BrokerProcess, port: int, config_dir: Path) -> None:
        self.process = process
        self.as_user: dict[str, list[str]] = {}
        for user, password in USERS.items():
            properties = config_dir / f"{user}.properties"
            properties.write_text(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                f"sasl.username={user}\nsasl.password={password}\n"
            )
            self.as_user[user] = [
                "-b",
                f"localhost:{port}",
                "--command-config",
                str(properties),
                "--timeout",
                "10",
            ]

    def acl(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return strom("acl", *args, *self.as_user[user])

    def rows(self, *args: str) -> list[tuple[str, ...]]:
        """The rows `strom acl list` shows the super user, without the header."""
        result = self.acl("admin", "list", *args)
        assert result.returncode == 0, result.stderr
        if not result.stdout:
            assert result.stderr == "no ACLs match\n"
            return []
        return table_rows(result.stdout)


def table_rows(output: str) -> list[tuple[str, ...]]:
    lines = output.splitlines()
    assert lines and re.split(r"\s{2,}", lines[0]) == HEADERS, output
    return [tuple(line.split()) for line in lines[1:]]


@pytest.fixture(scope="module")
def acl_cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCliBroker]:
    port = free_port()
    settings = [
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
    ]
    home = tmp_path_factory.mktemp("acl-cli-broker")
    process = BrokerProcess(
        home / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{port}"],
        extra=[part for setting in settings for part in ("--set", setting)],
    )
    process.start()
    try:
        yield AclCliBroker(process, port, home)
    finally:
        process.kill()


def test_add_list_and_remove_acls(acl_cli_broker: AclCliBroker) -> None:
    broker, topic, group = acl_cli_broker, unique_topic("orders"), unique_topic("app")
    added = broker.acl(
        "admin", "add", "--allow", "--principal", "User:alice", "-o", "read", "-o", "Write",
        "--topic", topic,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout == (
        f"added ACL: ALLOW User:alice READ on topic '{topic}' from any host\n"
        f"added ACL: ALLOW User:alice WRITE on topic '{topic}' from any host\n"
    )
    denied = broker.acl(
        "admin", "add", "--deny", "--principal", "User:bob", "--operation", "describe",
        "--group", f"{group}-", "--prefixed", "--host", "127.0.0.1",
    )  # fmt: skip
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout == (
        f"added ACL: DENY User:bob DESCRIBE on groups prefixed '{group}-' from host 127.0.0.1\n"
    )

    read, write = [
        ("TOPIC", "LITERAL", topic, "User:alice", "*", operation, "ALLOW")
        for operation in ("READ", "WRITE")
    ]
    prefixed = ("GROUP", "PREFIXED", f"{group}-", "User:bob", "127.0.0.1", "DESCRIBE", "DENY")
    assert broker.rows("--topic", topic) == [read, write]
    assert broker.rows("--topic", topic, "--prefixed") == []
    assert broker.rows("--principal", "User:bob", "--group", f"{group}-") == [prefixed]
    assert broker.rows("--topic", topic, "--operation", "WRITE", "--allow") == [write]
    everything = broker.rows()
    assert everything == sorted(everything)
    assert {read, write, prefixed} <= set(everything)

    one = broker.acl("admin", "remove", "--topic", topic, "-o", "write", "--yes")
    assert one.returncode == 0, one.stderr
    assert one.stdout == f"removed ACL: ALLOW User:alice WRITE on topic '{topic}' from any host\n"
    assert broker.rows("--topic", topic) == [read]

    # Without --yes and without a terminal to ask on, nothing is removed.
    unasked = broker.acl("admin", "remove", "--topic", topic)
    assert (unasked.returncode, unasked.stdout) == (2, "")
    assert unasked.stderr == (
        "strom: no terminal to ask on before removing ACLs: add --yes to remove them "
        "without asking\n"
    )
    assert broker.rows("--topic", topic) == [read]

    rest = broker.acl("admin", "remove", "--principal", "User:alice", "--topic", topic, "-y")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout == f"removed ACL: ALLOW User:alice READ on topic '{topic}' from any host\n"
    gone = broker.acl("admin", "list", "--topic", topic)
    assert (gone.returncode, gone.stdout, gone.stderr) == (0, "", "no ACLs match\n")
    again = broker.acl("admin", "remove", "--topic", topic, "--yes")
    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr == "no ACLs match: nothing removed\n"

    removed = broker.acl("admin", "remove", "--group", f"{group}-", "--prefixed", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("removed ACL: DENY User:bob DESCRIBE on groups prefixed")


def test_a_principal_needs_alter_or_describe_on_the_cluster(acl_cli_broker: AclCliBroker) -> None:
    broker = acl_cli_broker
    listed = broker.acl("alice", "list")
    assert (listed.returncode, listed.stdout) == (1, "")
    assert listed.stderr.startswith(
        "strom: not authorized to list ACLs: that needs DESCRIBE (or ALTER) on the cluster "
        "(CLUSTER_AUTHORIZATION_FAILED: "
    ), listed.stderr
    assert "User:alice" in listed.stderr
    grant = ["--allow", "--principal", "User:alice", "--topic", "t", "-o", "READ"]
    added = broker.acl("alice", "add", *grant)
    assert (added.returncode, added.stdout) == (1, "")
    assert added.stderr.startswith(
        "strom: not authorized to add ACLs: that needs ALTER on the cluster "
        "(CLUSTER_AUTHORIZATION_FAILED: "
    ), added.stderr
    assert added.stderr.count("\n") == 1  # said once, not once per binding

    # An ACL the CLI adds counts at once: DESCRIBE on the cluster lets alice list.
    cluster = ["--cluster", "--principal", "User:alice"]
    allowed = broker.acl("admin", "add", "--allow", "-o", "DESCRIBE", *cluster)
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout == "added ACL: ALLOW User:alice DESCRIBE on the cluster from any host\n"
    seen = broker.acl("alice", "list", *cluster)
    assert seen.returncode == 0, seen.stderr
    assert table_rows(seen.stdout) == [
        ("CLUSTER", "LITERAL", "kafka-cluster", "User:alice", "*", "DESCRIBE", "ALLOW")
    ]
    removing = broker.acl("alice", "remove", *cluster, "--yes")
    assert removing.returncode == 1
    assert removing.stderr.startswith("strom: not authorized to remove ACLs: that needs ALTER")
    assert broker.acl("admin", "remove", *cluster, "--yes").returncode == 0
    assert broker.acl("alice", "list").returncode == 1


def test_the_consoles_security_page_lists_them_as_the_cli_does(
    acl_cli_broker: AclCliBroker,
) -> None:
    broker, topic = acl_cli_broker, unique_topic("console")
    grant = ["--allow", "--principal", "User:alice", "-o", "read", "--topic", topic]
    assert broker.acl("admin", "add", *grant).returncode == 0

    def view(user: str) -> tuple[list[tuple[str, ...]] | None, str | None]:
        bootstrap, config = broker.as_user[user][1], Path(broker.as_user[user][3])
        return acl_listing(ConnectionSettings.create(bootstrap, 10.0, config))

    shown, problem = view("admin")
    assert problem is None
    assert ("TOPIC", "LITERAL", topic, "User:alice", "*", "READ", "ALLOW") in (shown or [])
    refused, problem = view("alice")
    assert refused is None
    assert (problem or "").startswith("not authorized to list ACLs"), problem
    assert broker.acl("admin", "remove", "--topic", topic, "--yes").returncode == 0


def test_without_an_authorizer_the_cli_says_so(strom_broker: StromCluster) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    grant = ["--allow", "--principal", "User:alice", "--topic", "t", "-o", "READ", "-o", "WRITE"]
    for args in (["list"], ["add", *grant], ["remove", "--topic", "t", "--yes"]):
        result = strom("acl", *args, *b)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", NO_AUTHORIZER), args
