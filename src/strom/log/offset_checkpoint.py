"""Kafka's checkpoint text files, and the log directory's ``replication-offset-checkpoint``.

The format is Kafka's: a version line ``0``, a line with the number of entries, then one
entry per line, its fields separated by a space. ``replication-offset-checkpoint`` holds
the high watermark of every partition of a log directory, one ``<topic> <partition>
<offset>`` line each; ``leader-epoch-checkpoint`` (see ``leader_epochs``) uses the same
framing. A file is replaced atomically: written to ``<name>.tmp``, fsynced, renamed over
the old one, and the directory fsynced so that the rename survives a crash.

Written by hand: a few lines of text that no library reads in this exact form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from strom.durable_files import replace_file

__all__ = [
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "CheckpointError",
    "parse_int",
    "read_checkpoint_file",
    "read_offset_checkpoint",
    "write_checkpoint_file",
    "write_offset_checkpoint",
]

REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
_VERSION = 0
_INT = re.compile(r"-?[0-9]+")

T = TypeVar("T")


class CheckpointError(ValueError):
    """A checkpoint file that is not in the expected format."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(f"{path}: line {line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


def parse_int(text: str) -> int:
    """A plain decimal integer (no sign but ``-``, no spaces or underscores)."""
    if _INT.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not an integer")
    return int(text)


def read_checkpoint_file(path: Path, parse_entry: Callable[[list[str]], T]) -> list[T] | None:
    """The entries of a checkpoint file, each parsed by ``parse_entry`` from its fields.

    None when the file does not exist; an empty file has no entries (as in Kafka).
    ``parse_entry`` raises ValueError for a bad entry. Raises CheckpointError, naming
    the file and line, for anything malformed.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise CheckpointError(path, bad_line, "not ASCII text") from exc
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    try:
        version = parse_int(lines[0])
    except ValueError as exc:
        raise CheckpointError(path, 1, f"bad version line: {exc}") from exc
    if version != _VERSION:
        raise CheckpointError(path, 1, f"unknown version {version}")
    if len(lines) < 2:
        raise CheckpointError(path, 2, "missing the entry count")
    try:
        count = parse_int(lines[1])
    except ValueError as exc:
        raise CheckpointError(path, 2, f"bad entry count: {exc}") from exc
    if count < 0:
        raise CheckpointError(path, 2, f"negative entry count {count}")
    entries: list[T] = []
    for number, line in enumerate(lines[2:], start=3):
        if len(entries) == count:
            raise CheckpointError(path, number, f"more entries than the count {count}")
        try:
            entries.append(parse_entry(line.split(" ")))
        except ValueError as exc:
            raise CheckpointError(path, number, f"bad entry {line!r}: {exc}") from exc
    if len(entries) != count:
        raise CheckpointError(
            path, len(lines) + 1, f"{len(entries)} entries where the count says {count}"
        )
    return entries


def write_checkpoint_file(path: Path, entries: Iterable[Sequence[object]]) -> None:
    """Replace ``path`` atomically and durably with ``entries`` (fields joined by spaces)."""
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    text = "".join(f"{line}\n" for line in [str(_VERSION), str(len(lines)), *lines])
    replace_file(path, text.encode("ascii"))


def _offset_entry(fields: list[str]) -> tuple[str, int, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields, found {len(fields)}")
    topic, partition, offset = fields[0], parse_int(fields[1]), parse_int(fields[2])
    if not topic:
        raise ValueError("empty topic name")
    if partition < 0:
        raise ValueError(f"negative partition {partition}")
    return topic, partition, offset


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from ``path``; empty when it does not exist.

    Raises CheckpointError (naming the file and line) when it is malformed or names a
    partition twice.
    """
    entries = read_checkpoint_file(path, _offset_entry)
    offsets: dict[tuple[str, int], int] = {}
    for number, (topic, partition, offset) in enumerate(entries or (), start=3):
        if (topic, partition) in offsets:
            raise CheckpointError(path, number, f"{topic}-{partition} appears twice")
        offsets[topic, partition] = offset
    return offsets


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Replace ``path`` atomically and durably (fsynced, directory too) with ``offsets``.

    Raises ValueError for a topic name the format cannot hold (empty or with
    whitespace) or a negative partition.
    """
    for topic, partition in offsets:
        if not topic or any(c.isspace() for c in topic) or not topic.isascii():
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        if partition < 0:
            raise ValueError(f"negative partition {partition} for topic {topic!r}")
    write_checkpoint_file(
        path,
        ((topic, partition, offsets[topic, partition]) for topic, partition in sorted(offsets)),
    )
