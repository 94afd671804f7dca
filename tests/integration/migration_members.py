"""Members of a group that moves between the classic protocol and the consumer protocol
(KIP-848), each in its own `migration_member.py` process, and what the migration tests
check about them: which partitions each owned when, and which records each processed and
committed.

A record is a (partition, offset, value) triple. A member *processes* a record when its
batch comes back from consume(), and has it *committed* once a synchronous commit of its
partition beyond it succeeded (the batch's own, or, when that one failed, as a classic
member's may during a rebalance, a later one while the member still owns the partition).
What a member processed and had not committed when it lost the partition or was killed,
it never commits: the next owner reads it again.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from group_members import MemberProcess

MEMBER_SCRIPT = Path(__file__).with_name("migration_member.py")

Record = tuple[int, int, str]

REFUSALS = {
    "GROUP_ID_NOT_FOUND": "group id does not exist",
    "INCONSISTENT_GROUP_PROTOCOL": "inconsistent group protocol",
}
"""The errors a broker without migration gives a member of the other protocol (Kafka's
codes, and the words of librdkafka's message for them). librdkafka makes the
ConsumerGroupHeartbeat's GROUP_ID_NOT_FOUND a fatal error: code _FATAL, the broker's
error named in its reason; JoinGroup's INCONSISTENT_GROUP_PROTOCOL comes as itself."""


class MigrationMember(MemberProcess):
    """One `migration_member.py` process, named by its client.id (`classic-0`,
    `consumer-1`, ...): its events, current assignment, records and errors."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **config: Any) -> None:
        self.name = name
        self.protocol = str(config.get("group.protocol", "classic"))
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(MEMBER_SCRIPT),
                bootstrap,
                group,
                topic,
                json.dumps({"client.id": name, **config}),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.killed_at: float | None = None
        self._incremental = (  # callbacks tell only what is added and what is taken away
            config.get("partition.assignment.strategy") == "cooperative-sticky"
            or self.protocol == "consumer"
        )
        self._assignment: set[int] = set()
        self._history: list[dict[str, Any]] = []
        self._processed: list[tuple[Record, float]] = []  # and when
        self._committed: list[tuple[Record, float]] = []  # and when
        self._abandoned: list[Record] = []  # processed, the partition lost before a commit
        self._pending: dict[int, list[Record]] = {}  # processed, not committed yet
        self._commit_failures: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self._lock:
                self._history.append(event)
                self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        if "assigned" in event:
            if self._incremental:
                self._assignment |= set(event["assigned"])
            else:
                self._abandon(self._assignment - set(event["assigned"]))
                self._assignment = set(event["assigned"])
        elif "revoked" in event:
            self._assignment -= set(event["revoked"])
            self._abandon(event["revoked"])
        elif "closed" in event:
            self._abandon(list(self._pending))
        elif "processed" in event:
            partition, records = event["processed"]
            batch = [(partition, offset, value) for offset, value in records]
            self._processed.extend((r, event["at"]) for r in batch)
            self._pending.setdefault(partition, []).extend(batch)
        elif "committed" in event:
            partition, next_offset = event["committed"]
            pending = self._pending.pop(partition, [])
            self._committed.extend((r, event["at"]) for r in pending if r[1] < next_offset)
            if later := [r for r in pending if r[1] >= next_offset]:
                self._pending[partition] = later
        elif "commit_failed" in event:
            self._commit_failures.append(event["commit_failed"][2])

    def _abandon(self, partitions: Iterable[int]) -> None:
        """What it did not commit of `partitions`, it never will: the next owner reads it."""
        for partition in partitions:
            self._abandoned.extend(self._pending.pop(partition, []))

    def kill(self) -> None:
        """SIGKILL (the time is kept: the member owned nothing after it), then read what
        it printed before."""
        if self.alive:
            self.killed_at = time.monotonic()
        super().kill()
        self._reader.join(10)

    def stop(self, timeout_s: float = 15) -> None:
        """SIGTERM: it commits its batch, closes its consumer and exits; then read what
        it printed before."""
        super().stop(timeout_s)
        self._reader.join(10)

    @property
    def assignment(self) -> set[int]:
        with self._lock:
            return set(self._assignment) if self.alive else set()

    @property
    def history(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._history)

    @property
    def processed(self) -> list[Record]:
        with self._lock:
            return [r for r, _ in self._processed]

    @property
    def committed(self) -> list[Record]:
        with self._lock:
            return [r for r, _ in self._committed]

    def processed_at(self) -> list[tuple[Record, float]]:
        with self._lock:
            return list(self._processed)

    def committed_at(self) -> list[tuple[Record, float]]:
        with self._lock:
            return list(self._committed)

    @property
    def committing(self) -> bool:
        """Its last event is a batch processed: its commit is being sent, or is waiting
        for an answer."""
        with self._lock:
            return bool(self._history) and "processed" in self._history[-1]

    @property
    def abandoned(self) -> list[Record]:
        """What it processed and never committed, because it lost the partition first
        (after a failed commit), or was killed (what it had not seen committed then)."""
        with self._lock:
            left = [] if self.alive else [r for each in self._pending.values() for r in each]
            return self._abandoned + left

    @property
    def commit_failures(self) -> list[str]:
        with self._lock:
            return list(self._commit_failures)

    def errors(self) -> list[dict[str, Any]]:
        return [event["error"] for event in self.history if "error" in event]

    def refusal(self) -> str | None:
        """The first error saying the broker refused this member's protocol, or None."""
        for error in self.errors():
            said = f"{error['code']} {error['reason']}".lower()
            if any(code.lower() in said or words in said for code, words in REFUSALS.items()):
                return f"{error['code']}: {error['reason']}"
        return None

    def ownership(self, now: float) -> dict[int, list[tuple[float, float]]]:
        """When it owned each partition, by its rebalance callbacks; what it still owned
        ends when it was killed, or `now`."""
        since: dict[int, float] = {}
        spans: dict[int, list[tuple[float, float]]] = {}
        for event in self.history:
            if "assigned" in event:
                for p in event["assigned"]:
                    since.setdefault(p, event["at"])
            elif "revoked" in event:
                for p in event["revoked"]:
                    if p in since:
                        spans.setdefault(p, []).append((since.pop(p), event["at"]))
        end = self.killed_at if self.killed_at is not None else now
        for p, start in since.items():
            spans.setdefault(p, []).append((start, end))
        return spans

    def summary(self) -> str:
        """One line: what it owns, how many records it processed and committed, its
        errors, and its last events (record lists shortened)."""
        tail = []
        for event in self.history[-6:]:
            if "processed" in event:
                event = {**event, "processed": [event["processed"][0], "..."]}
            tail.append(event)
        state = "alive" if self.alive else "killed" if self.killed_at else "stopped"
        return (
            f"{self.name} ({state}): owns {sorted(self.assignment)}, "
            f"processed {len(self.processed)}, committed {len(self.committed)}, "
            f"failed commits {len(self.commit_failures)} {self.commit_failures[-1:]}, "
            f"errors {self.errors()[-3:]}, last {tail}"
        )


def never_shared(members: Iterable[MigrationMember], partitions: int) -> None:
    """No partition was ever owned by two members at once (the callback times are on one
    clock: the machine's monotonic one)."""
    now = time.monotonic()
    spans = [(m.name, m.ownership(now)) for m in members]
    for p in range(partitions):
        owned = sorted((s, e, name) for name, each in spans for s, e in each.get(p, []))
        for (s1, e1, n1), (s2, e2, n2) in itertools.pairwise(owned):
            assert s2 >= e1, (
                f"partition {p} owned by two members at once: {n1} {s1:.3f}-{e1:.3f}, "
                f"{n2} {s2:.3f}-{e2:.3f}"
            )


def owned_once(members: Iterable[MigrationMember], partitions: int) -> bool:
    """Every partition owned by exactly one of the members, and each owns at least one."""
    owned = [m.assignment for m in members]
    union: set[int] = set()
    for each in owned:
        if not each or union & each:
            return False
        union |= each
    return union == set(range(partitions))


def first_records(records: Iterable[Record], count: int = 8) -> str:
    listed = sorted(records)
    more = f" and {len(listed) - count} more" if len(listed) > count else ""
    return f"{listed[:count]}{more}"


def check_each_committed_once(members: list[MigrationMember], produced: set[Record]) -> None:
    """(a) every produced record was processed and committed; (b) none was committed
    twice, nor read again after it was committed: a member reading again what another
    had committed means the group lost (or moved back) a committed offset."""
    committed = Counter(r for m in members for r in m.committed)
    missing = produced - set(committed)
    assert not missing, f"{len(missing)} records never consumed: {first_records(missing)}"
    twice = {r for r, n in committed.items() if n > 1}
    assert not twice, (
        f"{len(twice)} records consumed twice (a committed offset was lost or went back): "
        f"{first_records(twice)}; by member: "
        + ", ".join(f"{m.name} {len(twice & set(m.committed))}" for m in members)
    )
    strange = set(committed) - produced
    assert not strange, f"records nobody produced: {first_records(strange)}"
    check_read_again_only_when_abandoned(members)


def check_read_again_only_when_abandoned(members: list[MigrationMember]) -> None:
    """No record was read after a member had committed it (the group's committed offset
    would have gone back), and a record read more than once was abandoned by all its
    readers but one: they lost the partition before committing it (after a failed commit,
    or killed), so that the group's committed offset was still before it."""
    committed = {r: (m.name, at) for m in members for r, at in m.committed_at()}
    after = [
        (r, m.name, at, *committed[r])
        for m in members
        for r, at in m.processed_at()
        if r in committed and at > committed[r][1]
    ]
    assert not after, (
        f"{len(after)} records read again after they were committed: (record, reader, at, "
        f"committer, committed at) {sorted(after)[:8]}"
    )
    processed = Counter(r for m in members for r in m.processed)
    abandoned = Counter(r for m in members for r in m.abandoned)
    again = {r for r, n in processed.items() if n - abandoned[r] > 1}
    assert not again, (
        f"{len(again)} records read more than once without being abandoned: "
        f"{first_records(again)}; read by: "
        + ", ".join(f"{m.name} {len(again & set(m.processed))}" for m in members)
    )


def check_after_a_kill(
    members: list[MigrationMember], killed: MigrationMember, produced: set[Record]
) -> None:
    """Every produced record processed at least once, none committed twice, and a record
    read twice only where the killed member had not committed (or, as anywhere, where a
    member lost a partition after a failed commit)."""
    check_consumed_at_least_once(members, produced)


def check_consumed_at_least_once(members: list[MigrationMember], produced: set[Record]) -> None:
    """Every produced record processed at least once, none committed twice, and a record
    read twice only where its readers but one never committed it (killed, or lost the
    partition after a failed commit)."""
    processed = Counter(r for m in members for r in m.processed)
    missing = produced - set(processed)
    assert not missing, f"{len(missing)} records never consumed: {first_records(missing)}"
    committed = Counter(r for m in members for r in m.committed)
    twice = {r for r, n in committed.items() if n > 1}
    assert not twice, f"{len(twice)} records committed twice: {first_records(twice)}"
    check_read_again_only_when_abandoned(members)


def check_commits_kept(
    members: Iterable[MigrationMember], before_s: float, committed: dict[int, int]
) -> None:
    """No commit a member saw succeed before `before_s` (monotonic) is lost: the group's
    `committed` offset of each partition is past every record committed by then."""
    seen: dict[int, int] = {}
    for member in members:
        for (partition, offset, _), at in member.committed_at():
            if at < before_s:
                seen[partition] = max(seen.get(partition, 0), offset + 1)
    lost = {p: (n, committed.get(p)) for p, n in seen.items() if committed.get(p, -1) < n}
    assert not lost, (
        f"commits acknowledged before the broker was killed are lost (partition: "
        f"(acknowledged, committed now)): {lost}"
    )


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    members: Iterable[MigrationMember],
    story: Callable[[], str],
) -> None:
    """Poll `condition` every 50 ms for up to `timeout_s`. Fail at once when the broker
    refuses a member's protocol (the migration is not served), or on the timeout; either
    way with `story()`."""
    watched = list(members)
    deadline = time.monotonic() + timeout_s
    while True:
        for member in watched:
            refused = member.refusal()
            if refused is not None:
                raise AssertionError(
                    f"the broker refused {member.name} (group.protocol={member.protocol}) "
                    f"while waiting for {what}: {refused}\n{story()}"
                )
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{story()}")
        time.sleep(0.05)
