"""`strom quota`'s pure parts (cli/quota_model.py): the entity its options name, the
changes its arguments ask for, the requests it sends (checked against kio's schemas) and
how it shows answers and refusals."""

from __future__ import annotations

from types import SimpleNamespace as Answer

import pytest

from strom.cli.common import CommandError, ExitCode
from strom.cli.quota_model import (
    EntityChoice,
    QuotaChange,
    alter_errors,
    alter_request,
    describe_error,
    describe_request,
    entity_label,
    entity_parts,
    filter_components,
    parse_changes,
    quota_rows,
    value_text,
)

NONE = EntityChoice()


def test_options_name_one_entity_by_name_or_default() -> None:
    assert entity_parts(EntityChoice("alice"), EntityChoice("app"), NONE) == [
        ("user", "alice"),
        ("client-id", "app"),
    ]
    assert entity_parts(EntityChoice(default=True), NONE, NONE) == [("user", None)]
    assert entity_parts(NONE, NONE, EntityChoice(default=True)) == [("ip", None)]


@pytest.mark.parametrize(
    ("user", "client_id", "ip", "problem"),
    [
        (NONE, NONE, NONE, "name an entity"),
        (EntityChoice("a", default=True), NONE, NONE, "choose one of --user NAME and --user-"),
        (EntityChoice(""), NONE, NONE, "--user must not be empty"),
        (EntityChoice("a"), NONE, EntityChoice("10.0.0.1"), "cannot be combined"),
    ],
)
def test_bad_entity_options_are_usage_errors(
    user: EntityChoice, client_id: EntityChoice, ip: EntityChoice, problem: str
) -> None:
    with pytest.raises(CommandError, match=problem) as info:
        entity_parts(user, client_id, ip)
    assert info.value.exit_code is ExitCode.USAGE


def test_changes_are_key_value_settings_and_removals_each_key_once() -> None:
    assert parse_changes(["producer_byte_rate=1048576", "request_percentage = 12.5"], ["x"]) == [
        QuotaChange("producer_byte_rate", 1048576.0),
        QuotaChange("request_percentage", 12.5),
        QuotaChange("x", None),
    ]
    for settings, removals, problem in [
        ([], [], "nothing to change"),
        (["k"], [], "expected KEY=VALUE"),
        (["k=1", "k=2"], [], "k is given twice"),
        (["k=1"], ["k"], "k is given twice"),
        (["k=lots"], [], "'lots' is not a number"),
        (["k=inf"], [], "not a finite number"),
    ]:
        with pytest.raises(CommandError, match=problem):
            parse_changes(settings, removals)


def test_requests_fit_kafkas_schemas() -> None:
    from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
    from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest

    from strom.protocol.codec import build

    alter = alter_request(
        [("user", None), ("client-id", "app")],
        [QuotaChange("producer_byte_rate", 10.0), QuotaChange("consumer_byte_rate", None)],
        True,
    )
    built = build(AlterClientQuotasRequest, alter)
    assert built.validate_only is True
    ops = built.entries[0].ops
    assert [(op.key, op.value, op.remove) for op in ops] == [
        ("producer_byte_rate", 10.0, False),
        ("consumer_byte_rate", 0.0, True),
    ]
    components = filter_components(EntityChoice("alice"), EntityChoice(default=True), NONE)
    described = build(DescribeClientQuotasRequest, describe_request(components, True))
    assert [(c.entity_type, c.match_type, c.match) for c in described.components] == [
        ("user", 0, "alice"),
        ("client-id", 1, None),
    ]
    assert filter_components(NONE, NONE, NONE) == []


def _entity(*parts: tuple[str, str | None]) -> list[Answer]:
    return [Answer(entity_type=kind, entity_name=name) for kind, name in parts]


def test_answers_become_rows_and_refusals_errors() -> None:
    answer = Answer(
        error_code=0,
        error_message=None,
        entries=[
            Answer(
                entity=_entity(("client-id", "app"), ("user", None)),
                values=[Answer(key="producer_byte_rate", value=1048576.0)],
            ),
            Answer(
                entity=_entity(("ip", "10.0.0.1")),
                values=[Answer(key="connection_creation_rate", value=20.0)],
            ),
            Answer(
                entity=_entity(("user", "alice")),
                values=[Answer(key="request_percentage", value=12.5)],
            ),
        ],
    )
    assert describe_error(answer) is None
    assert quota_rows(answer) == [
        ("ip=10.0.0.1", "connection_creation_rate", "20"),
        ("user=<default>, client-id=app", "producer_byte_rate", "1048576"),
        ("user=alice", "request_percentage", "12.5"),
    ]
    refused = Answer(error_code=31, error_message="Cluster authorization failed.", entries=None)
    failure = describe_error(refused)
    assert failure is not None and "Cluster authorization failed." in failure.message
    altered = Answer(
        entries=[
            Answer(error_code=0, error_message=None, entity=_entity(("user", "a"))),
            Answer(
                error_code=42,
                error_message="Invalid configuration key x",
                entity=_entity(("user", "b")),
            ),
        ]
    )
    [error] = alter_errors(altered)
    assert error.message.startswith("user=b: ")
    assert error.message.endswith("Invalid configuration key x")
    assert entity_label([("ip", None)]) == "ip=<default>"
    assert value_text(3.0) == "3" and value_text(0.25) == "0.25"


def test_the_command_loads_neither_kio_nor_cryptography() -> None:
    import subprocess
    import sys

    code = (
        "import sys, strom.cli.main, strom.cli.quota; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kio', 'cryptography')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_usage_errors_exit_2_before_connecting() -> None:
    from typer.testing import CliRunner

    from strom.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["quota", "set", "producer_byte_rate=1"])
    assert result.exit_code == 2
    assert "name an entity" in result.stderr
    result = runner.invoke(app, ["quota", "set", "--user", "a", "--ip", "::1", "x=1"])
    assert result.exit_code == 2
    assert "cannot be combined" in result.stderr
