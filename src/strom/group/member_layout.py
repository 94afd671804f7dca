"""The layout KIP-848 consumer groups and KIP-932 share groups share in
`__consumer_offsets`: their record keys and their assignments.

A key is not flexible: an int16 version, the group id as an int16-length string and,
for a member's record, the member id likewise. Which versions name a group's record and
which a member's is each group type's table (`consumer/records.py`: 3-8,
`share/records.py`: 10-15). An assignment (a target or current assignment's partitions)
is a compact array of topics, each a 16-byte topic id, a compact array of int32
partitions and a tagged-field section; a topic listed twice reads as the union of its
lists. Both types write their topics sorted by id and their partitions in order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

from strom.protocol.layout import LayoutReader, LayoutWriter

__all__ = [
    "Assignment",
    "decode_member_key",
    "encode_member_key",
    "read_assignment",
    "write_assignment",
]

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Topic id -> partitions. Treated as immutable wherever it is held."""

K = TypeVar("K")


def encode_member_key(version: int, group_id: str, member_id: str | None) -> bytes:
    """A key: its version, the group id and (for a member's record) the member id.
    Raises RecordLayoutError for a string too long for an int16 length."""
    w = LayoutWriter()
    w.i16(version)
    w.string(group_id, compact=False)
    if member_id is not None:
        w.string(member_id, compact=False)
    return w.bytes()


def decode_member_key(
    data: bytes,
    group_keys: Mapping[int, Callable[[str], K]],
    member_keys: Mapping[int, Callable[[str, str], K]],
) -> K | int:
    """The key a table names for the data's version, or the version when neither table
    has it (the caller says which error that is). Raises RecordLayoutError."""
    r = LayoutReader(data)
    version = r.i16()
    group_id = r.string(compact=False)
    group_key = group_keys.get(version)
    if group_key is not None:
        return group_key(group_id)
    member_key = member_keys.get(version)
    if member_key is None:
        return version
    return member_key(group_id, r.string(compact=False))


def write_assignment(w: LayoutWriter, assignment: Assignment) -> None:
    w.array_length(len(assignment), compact=True)
    for topic_id in sorted(assignment):
        w.out += topic_id.bytes
        partitions = sorted(assignment[topic_id])
        w.array_length(len(partitions), compact=True)
        for partition in partitions:
            w.i32(partition)
        w.tagged_fields({})


def read_assignment(r: LayoutReader) -> dict[uuid.UUID, frozenset[int]]:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.array_length(compact=True) or 0):
        topic_id = uuid.UUID(bytes=r.take(16))
        partitions = [r.i32() for _ in range(r.array_length(compact=True) or 0)]
        r.tagged_fields()
        assignment[topic_id] = assignment.get(topic_id, frozenset()) | frozenset(partitions)
    return assignment
