"""Run consumer-group members as child processes and follow what each one reports."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")


KIP848_SESSION_MS = 4000
"""The session timeout of the `kip848_broker` fixture's consumer groups (conftest.py)."""

KIP848_BROKER_SETTINGS = (
    f"group.consumer.session.timeout.ms={KIP848_SESSION_MS}",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=100",
)
"""The broker keys (`--set` values) of the `kip848_broker` fixture: KIP-848 groups with
short timers, a 4 s session timeout and heartbeats every 0.5 s."""


class MemberProcess:
    """A member's child process: alive, killed with SIGKILL, or stopped with SIGTERM (the
    member then closes its consumer and leaves its group, unless it is static)."""

    process: subprocess.Popen[bytes]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self.process.wait(10)

    def stop(self, timeout_s: float = 15) -> None:
        if self.alive:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class Member(MemberProcess):
    """One `group_member.py` process: its events, current assignment, and records."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), bootstrap, group, topic, json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.assignment: set[int] = set()
        self.records: list[tuple[int, int, str]] = []
        self.history: list[dict[str, Any]] = []
        self.incremental = (  # callbacks tell only what is added and what is taken away
            config.get("partition.assignment.strategy") == "cooperative-sticky"
            or config.get("group.protocol") == "consumer"
        )
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self._lock:
                self.history.append(event)
                if "assigned" in event:
                    if self.incremental:
                        self.assignment |= set(event["assigned"])
                    else:
                        self.assignment = set(event["assigned"])
                elif "revoked" in event:
                    self.assignment -= set(event["revoked"])
                elif "record" in event:
                    self.records.append(tuple(event["record"]))  # type: ignore[arg-type]

    def snapshot(self) -> tuple[set[int], list[tuple[int, int, str]], list[dict[str, Any]]]:
        with self._lock:
            return set(self.assignment), list(self.records), list(self.history)


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll `condition`; on a timeout, fail with `what` and what `explain` says then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    story = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{story}")


def group_story(bootstrap: str, group: str, members: list[Member]) -> str:
    """The group as the broker describes it, and what each member process reported."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        found = admin.describe_consumer_groups([group])[group].result(10)
        lines = [f"group {group}: {found.state}, protocol {found.partition_assignor}"]
        for m in found.members:
            owned = sorted(tp.partition for tp in m.assignment.topic_partitions)
            lines.append(f"  member {m.member_id} ({m.client_id}): {owned}")
    except Exception as error:  # the story is told on a failure; it must not hide it
        lines = [f"group {group}: not described ({error})"]
    for i, member in enumerate(members):
        lines.append(f"  process {i}: {member.snapshot()[2][-8:]}")
    return "\n".join(lines)


def balanced(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one live member, shares differing by at most 1."""
    owned = [m.snapshot()[0] for m in members]
    union: set[int] = set()
    for each in owned:
        if union & each:
            return False
        union |= each
    sizes = [len(each) for each in owned]
    return union == set(range(partitions)) and max(sizes) - min(sizes) <= 1
