"""The command line itself: help and usage errors, none of which touch the network."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from strom.cli.main import app

runner = CliRunner()


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "topic", "produce", "consume"):
        assert command in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["consume", "t", "--from-beginning", "--offset", "3"],
            "strom: choose one of --from-beginning, --from-end, --offset and --from-timestamp\n",
        ),
        (
            ["consume", "t", "--from-timestamp", "soon"],
            "strom: --from-timestamp 'soon': expected milliseconds since the epoch or an "
            "ISO 8601 time such as 2026-11-28T09:30:00Z\n",
        ),
        (
            ["consume", "t", "--grep", "["],
            "strom: --grep '[' is not a regular expression: "
            "unterminated character set at position 0\n",
        ),
        (["produce", "t", "--header", "nokey"], "strom: --header expects key=value, got 'nokey'\n"),
        (["topic", "create", "t", "--config", "x"], "strom: --config expects key=value, got 'x'\n"),
        (["consume", "t", "--key-separator", ""], "strom: --key-separator must not be empty\n"),
        (
            ["topic", "list", "--bootstrap-server", " "],
            "strom: --bootstrap-server must not be empty\n",
        ),
    ],
)
def test_usage_errors_exit_2_before_connecting(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == message


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "add-partitions", "t"],  # --total is required
        ["produce", "t", "--acks", "2"],
        ["consume", "t", "--count", "0"],
        ["no-such-command"],
    ],
)
def test_bad_options_exit_2(args: list[str]) -> None:
    assert runner.invoke(app, args).exit_code == 2


def test_serve_reports_an_unreadable_config_file() -> None:
    result = runner.invoke(app, ["serve", "--config", "/nonexistent/strom.properties"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "strom: cannot read config file '/nonexistent/strom.properties'"
    )
