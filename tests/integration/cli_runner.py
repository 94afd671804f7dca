"""Running the `strom` command in a subprocess, and reading the tables it prints: the one
runner the CLI tests share."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping

__all__ = ["strom", "table"]


def strom(
    *args: str,
    stdin: str | None = None,
    timeout_s: float = 60,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m strom ARGS` with `stdin` as its input (else no input at all), the
    environment with `env` over it, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "strom", *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else {**os.environ, **env},
    )


def table(output: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table whose header line starts with `first_header` (columns are
    separated by two or more spaces)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    headers = re.split(r" {2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(headers, re.split(r" {2,}", line.strip()), strict=True)))
    return rows
